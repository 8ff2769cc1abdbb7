"""``Conversation``, one session's agent plus its stored history, shared by ``chat``, ``run``,
the demo and the gateway; ``open_conversation`` builds one on an ``offload.Offload``.

Invariants:
- the parent agent's ``session_id`` is the session id, and every turn runs with the session
  key bound to it, so ``delegate_task`` routes each background result back to this session;
- a turn is stored whole (its new messages, plus the delegation ids it injected, in one
  transaction) only after the agent returned; a turn the process did not survive is not
  stored, and the results it dispatched still come back through the ledger;
- a turn that carried background results and ended in error is not stored at all: the parent
  never took those results, so they stay pending and are injected again later, once (a stored
  turn with their ids would acknowledge them on the next offer);
- one turn at a time: ``run_turn`` is not re-entrant, and nothing is injected into a running
  turn (callers inject results only between turns);
- near the context window, a turn first compresses old turns into a successor session
  (``session_id`` changes; the lineage is stored with it), so the session id is read per turn.
"""
from __future__ import annotations

import contextvars
import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from offload.agent import compression
from offload.agent.core import AIAgent
from offload.agent.session_store import SessionStore, new_session_id
from offload.context.approval import reset_current_session_key, set_current_session_key
from offload.context.session_env import set_async_delivery, set_wake_session
from offload.engine.observers import span
from offload.errors import CliError
from offload.ids import resolve
from offload.runtime import Offload

logger = logging.getLogger(__name__)


def open_conversation(off: Offload, store: SessionStore, resume: str | None = None, *,
                      sync_delegation: bool = False, api_key: str | None = None,
                      wakeable: bool = False) -> Conversation:
    """A new session, or the stored one ``resume`` names (``last`` = the most recent), whose
    agent delegates through ``off``."""
    cfg = off.config
    session_id = _resolve_session(store, resume) if resume else new_session_id()
    agent = off.build_agent(session_id, api_key=api_key)  # first: a config error must not leave an empty session
    if not resume:
        store.create_session(session_id, model=cfg.model)
    return Conversation(agent, store, sync_delegation=sync_delegation, wakeable=wakeable,
                        context_window_tokens=cfg.context_window_tokens, compress_at_ratio=cfg.compress_at_ratio)


def _resolve_session(store: SessionStore, wanted: str) -> str:
    """``last``, a full session id, or a unique prefix of one."""
    if wanted == "last":
        recent = store.list_sessions(limit=1)
        if not recent:
            raise CliError("there is no session to resume yet; start one with `offload chat`")
        return recent[0].session_id
    if store.session_exists(wanted):
        return store.live_tip(wanted) or wanted  # a compressed session continues at its live tip
    found = resolve(wanted, (s.session_id for s in store.list_sessions(limit=-1)), kind="session",
                    id_prefix="sess_", listing="offload sessions")
    return store.live_tip(found) or found


@dataclass
class TurnResult:
    answer: str | None
    exit_reason: str
    error: str | None = None
    handles: list[dict[str, Any]] = field(default_factory=list)  # what each delegate_task call returned
    error_kind: str | None = None  # "model" | "endpoint" | "internal" when exit_reason is "error"
    compressed_from: str | None = None  # the session this turn's context was compressed out of
    finish_reason: str | None = None  # how the model's last reply ended ("length": cut off)
    ctrl_c: bool = False  # the user pressed Ctrl-C while it ran

    @property
    def dispatched(self) -> list[dict[str, Any]]:
        return [h for h in self.handles if h.get("status") == "dispatched"]


class Conversation:
    """One session: its agent, its history (as stored) and the turn runner."""

    def __init__(self, agent: AIAgent, store: SessionStore, *, sync_delegation: bool = False,
                 wakeable: bool = False, context_window_tokens: int | None = None,
                 compress_at_ratio: float = 0.8, session_key: str = "") -> None:
        self.agent = agent
        self.session_key = session_key  # a chat gateway routes results by its chat key; "" = by session id
        self.store = store
        self.session_id = agent.session_id
        self.sync_delegation = sync_delegation
        # A stateless front end (one request, then gone) whose session can be woken later by id:
        # background results are recorded for that id and delivered when it is resumed.
        self.wakeable = wakeable
        self.context_window_tokens = context_window_tokens
        self.compress_at_ratio = compress_at_ratio
        self.history: list[dict[str, Any]] = store.load_messages(self.session_id)
        self._turn_lock = threading.Lock()

    def run_turn(self, text: str, injected_ids: Iterable[str] = (),
                 on_wait: Callable[[], None] | None = None) -> TurnResult:
        """Run one turn on a worker thread and store it; Ctrl-C interrupts the turn, not us.

        ``on_wait`` is called about every 0.1 s while the turn runs (e.g. to refresh a view).
        """
        if not self._turn_lock.acquire(blocking=False):
            raise RuntimeError("a turn is already running in this conversation; wait for it to finish")
        try:
            box: dict[str, Any] = {}
            done = threading.Event()
            context = contextvars.copy_context()
            worker = threading.Thread(target=context.run, args=(self._turn, text, list(injected_ids), box, done),
                                      name="offload-turn", daemon=True)
            # Wait on an Event, not Thread.join: a join interrupted by Ctrl-C marks a running
            # thread as finished on Python 3.11 (it releases the thread's state lock). The start
            # is inside the guarded loop too: Thread.start itself waits, and Ctrl-C may land there.
            started = False
            while not done.is_set():
                try:
                    if not started:
                        started = True
                        worker.start()
                    done.wait(0.1)
                    if on_wait is not None:
                        on_wait()
                except KeyboardInterrupt:
                    self.agent.interrupt("stopped by the user (Ctrl-C)")
                    box["ctrl_c"] = True
            if "error" in box:
                raise box["error"]
            result = box["result"]
            result.ctrl_c = bool(box.get("ctrl_c"))
            return result
        finally:
            self._turn_lock.release()

    def _turn(self, text: str, injected_ids: list[str], box: dict[str, Any], done: threading.Event) -> None:
        compressed_from = self._compress_if_needed(text)  # first: the turn runs in the live session
        token = set_current_session_key(self.session_key or self.session_id)
        if self.sync_delegation:
            set_async_delivery(False)  # delegate_task then runs its children in this turn
        elif self.wakeable:
            set_async_delivery(False)  # no push back into this request...
            set_wake_session(self.session_id)  # ...but the session can be woken later by its id
        try:
            with span("offload.turn", session_id=self.session_id, delivers=injected_ids) as traced:
                out = self.agent.run_conversation(text, self.history)
                traced.set(exit_reason=out.get("exit_reason"), api_calls=out.get("api_calls"))
                if out.get("exit_reason") == "error":
                    traced.fail(str(out.get("error") or "the turn failed"))
            messages = out.get("messages") or []
            new = _new_messages(self.history, messages)
            if not (injected_ids and out.get("exit_reason") == "error"):  # see the module's invariants
                self.store.append_turn(self.session_id, new, injected_ids)
                self.history = messages
            box["result"] = TurnResult(out.get("final_response"), out.get("exit_reason") or "?", out.get("error"),
                                       delegate_handles(new), out.get("error_kind"), compressed_from,
                                       out.get("finish_reason"))
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc
        finally:
            reset_current_session_key(token)
            done.set()

    def _compress_if_needed(self, incoming: str) -> str | None:
        """Summarise old turns into a successor session when the context is nearly full.

        Returns the old session id when it compressed. A summary that fails is logged and the
        turn runs uncompressed: losing the user's turn would be worse than a long request.
        """
        old = self.session_id
        try:
            if not compression.needs_compression(self.history, incoming, self.context_window_tokens,
                                                 self.compress_at_ratio):
                return None
            _, old_turns, _ = compression.split_for_compression(self.history)
            history = compression.compressed_history(self.history, compression.summarize(self.agent.llm, old_turns))
            new = self.store.continue_session(old, history, model=getattr(self.agent, "model", None))
        except Exception:
            logger.warning("context compression of session %s failed; continuing uncompressed", old, exc_info=True)
            return None
        self.session_id = self.agent.session_id = new
        self.history = history
        logger.info("context compressed: session %s continues as %s", old, new)
        return old


def _new_messages(history: list[dict[str, Any]], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the turn added. The agent puts its system prompt first when history has none."""
    start = len(history)
    if history and messages and messages[0].get("role") == "system" and history[0].get("role") != "system":
        start += 1
    return messages[start:] if history else messages


def delegate_handles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parsed results of the delegate_task calls among ``messages``, in call order."""
    call_ids = [call.get("id") for m in messages if m.get("role") == "assistant"
                for call in m.get("tool_calls") or [] if (call.get("function") or {}).get("name") == "delegate_task"]
    by_id = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    handles = []
    for call_id in call_ids:
        try:
            parsed = json.loads(by_id.get(call_id) or "")
        except ValueError:
            continue
        if isinstance(parsed, dict):
            handles.append(parsed)
    return handles
