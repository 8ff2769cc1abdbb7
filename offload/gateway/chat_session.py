"""One chat (or forum thread) served by the gateway: its current agent session and its turns.

A ``ChatSession`` owns one worker thread that runs that chat's turns one at a time: user
messages, and batches of background results handed over by the delivery watcher. A results
batch is shown in the chat, injected as ONE new turn (coalesced), the turn stored, and only
then are the claims completed — only if that turn succeeded: a failed turn gives them back
for a retry, unacknowledged and not stored. A send the platform refuses for good (``ChatGone``) drops the
batch with the reason (kept in the ledger); a transient failure gives it back to the watcher,
which retries later. A result too long for one message is shown in parts, and every part shown
is recorded under the claim, so a retry -- here, or by another gateway after this one died --
continues from the first part not shown instead of repeating the others.

Invariants: the worker is the only code that runs a turn of this chat, so a result is never
spliced into a running turn; a result whose delegation id a stored turn already carries is
acknowledged without being shown or injected again (exactly once across crashes). Every turn
runs with this chat's identity bound (session key, chat, thread), so ``delegate_task`` routes
its results back here — and, on a platform that cannot deliver later, runs inline instead.
"""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from offload.context import result_chain
from offload.engine.events import is_interim
from offload.engine.states import QUEUED, event_state
from offload.gateway.platform import ChatGone, Incoming, Platform, Route, sending_result
from offload.gateway.runner import BATCH_PREFIX
from offload.gateway.session_context import clear_session_vars, set_session_vars
from offload.render.truncation import unfinished_reason

if TYPE_CHECKING:  # conversations are built by the caller; the gateway never imports the CLI layer
    from offload.session.conversation import Conversation, TurnResult
    from offload.engine.delivery import Deliveries

logger = logging.getLogger(__name__)
Event = dict[str, Any]


@dataclass
class Claimed:
    """A result the watcher claimed for this chat; ``claim`` settles it in the ledger."""

    event: Event
    text: str
    claim: str
    deliveries: Deliveries  # the runtime's: where the claim is settled
    shown_parts: int = 0  # parts of a split message already shown, by any attempt (from the ledger)

    @property
    def delegation_id(self) -> str:
        return str(self.event.get("delegation_id") or "")

    @property
    def dedupe_id(self) -> str:
        """The id a stored turn records; "" for an interim notice, which is not the result: the
        unit's final event must never be deduplicated, acknowledged or dropped because of it."""
        return "" if is_interim(self.event) else self.delegation_id

    def acknowledge(self) -> None:
        """The turn carrying this result is stored (or it was before a crash): settle the claim."""
        if self.claim and not self.deliveries.complete_event(self.event, self.claim):
            self.deliveries.mark_delivered(self.delegation_id)  # the lease ran out; the stored turn counts

    def drop(self, reason: str) -> None:
        if not self.dedupe_id:
            return  # an interim notice has no row of its own; the unit's result is still to come
        self.deliveries.drop(self.delegation_id, self.claim or None, reason)
        logger.warning("dropped delegation %s: %s", self.delegation_id, reason)

    def shown(self, parts: int) -> None:
        """The first ``parts`` parts of this result reached the chat: a retry starts after them."""
        self.shown_parts = parts
        if self.claim:
            self.deliveries.record_progress(self.delegation_id, self.claim, parts)


# What the worker tells the watcher about a batch: settled, or give it back for a retry (an
# "outage" of the parent's model endpoint spends none of the results' delivery attempts).
Outcome = Callable[[list[Claimed], str], None]  # (batch, "done" | "retry" | "outage")


class ChatSession:
    def __init__(self, key: str, route: Route, chat_type: str, platform: Platform,
                 open_conversation: Callable[[str, bool], Conversation], on_batch_done: Outcome,
                 on_new_session: str = "deliver") -> None:
        self.key, self.route, self.chat_type, self.platform = key, route, chat_type, platform
        self._open = open_conversation  # (session key, fresh) -> this chat's Conversation
        self._on_batch_done = on_batch_done
        self._on_new_session = on_new_session
        self.conversation = open_conversation(key, False)
        self._jobs: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._busy = threading.Event()
        self._worker = threading.Thread(target=self._work, name=f"chat-{route.chat_id}", daemon=True)
        self._worker.start()

    @property
    def idle(self) -> bool:
        return not self._busy.is_set() and self._jobs.empty()

    def submit_user(self, message: Incoming) -> None:
        self._submit("user", message)

    def submit_results(self, batch: list[Claimed]) -> None:
        self._submit("results", batch)

    def new_session(self) -> None:
        self._submit("new", None)

    def _submit(self, kind: str, payload: Any) -> None:
        self._busy.set()
        self._jobs.put((kind, payload))

    def say(self, body: str, header: str = "") -> list[str]:
        """Send a notice to this chat; a failure is logged, never raised into a caller's loop."""
        try:
            return self.platform.send(self.route, body, header)
        except Exception as exc:
            logger.warning("could not send to chat %s: %s", self.route.chat_id, exc)
            return []

    # -- the worker ---------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            kind, payload = self._jobs.get()
            self._busy.set()
            try:
                if kind == "user":
                    self._answer(self._run_turn(payload.text, [], payload))
                elif kind == "results":
                    self._results_turn(payload)
                else:
                    self._start_new_session()
            except Exception:
                logger.exception("chat %s: job %s failed", self.route.chat_id, kind)
            finally:
                if self._jobs.empty():
                    self._busy.clear()

    def _run_turn(self, text: str, injected_ids: list[str], message: Incoming | None = None) -> TurnResult:
        """One turn with this chat's identity bound (the turn thread copies this context)."""
        set_session_vars(platform=self.platform.name, source="gateway", chat_id=self.route.chat_id,
                         chat_type=self.chat_type, thread_id=self.route.thread_id,
                         user_id=message.user_id if message else "", user_name=message.user_name if message else "",
                         session_key=self.key, session_id=self.conversation.session_id,
                         async_delivery=self.platform.delivers_later)
        try:
            return self.conversation.run_turn(text, injected_ids)
        finally:
            clear_session_vars()

    def _start_new_session(self) -> None:
        previous = self.conversation.session_id
        self.conversation = self._open(self.key, True)
        fate = "delivered here, labelled" if self._on_new_session == "deliver" else "dropped"
        self.say(f"New session {self.conversation.session_id}. Background results of session {previous} "
                 f"that have not arrived yet will be {fate} (gateway.on_new_session).")

    def _answer(self, result: TurnResult) -> None:
        for handle in result.dispatched:
            queued = handle.get("state") == QUEUED
            self.say(f"{handle.get('delegation_id') or ''}: "
                     + ("queued, every background slot is busy; it starts when one frees. " if queued else "")
                     + "The result will arrive in this chat; /agents shows progress.",
                     header="Background work queued" if queued else "Background work started")
        for handle in result.handles:
            if handle.get("mode") == "sync" and handle.get("note"):
                self.say(str(handle["note"]), header="Subagents ran inline")
            elif handle.get("status") == "error" and handle.get("error"):  # the user sees why, not only the model
                self.say(str(handle["error"]), header="delegate_task refused")
        if result.exit_reason == "error":
            self.say(f"agent error: {result.error}")
        if result.answer:
            self.say(result.answer)
        unfinished = unfinished_reason(result.exit_reason, result.finish_reason)
        if unfinished:
            self.say(f"(the answer above is incomplete: {unfinished})")

    def _results_turn(self, batch: list[Claimed]) -> None:
        session_id = self.conversation.session_id
        fresh = []
        for item in batch:
            if item.dedupe_id and self.conversation.store.was_injected(session_id, item.dedupe_id):
                item.acknowledge()  # the turn was stored before a crash; only the acknowledgement was lost
            else:
                fresh.append(item)
        fresh = self._apply_new_session_policy(fresh)
        if not fresh:
            self._on_batch_done(batch, "done")
            return
        try:
            for item in fresh:
                with sending_result(item.dedupe_id):
                    self.platform.send(self.route, item.text, header=_header(item, self._from_previous_session(item)),
                                       first_part=item.shown_parts, on_part=item.shown)
        except ChatGone as exc:
            for item in fresh:
                item.drop(f"chat {self.route.chat_id} cannot be reached: {exc}")
            self._on_batch_done(batch, "done")
            return
        except Exception as exc:
            logger.warning("chat %s: showing %d result(s) failed (%s); retrying later",
                           self.route.chat_id, len(fresh), exc)
            self._on_batch_done(fresh, "retry")
            return
        texts = [item.text for item in fresh]
        turn_text = texts[0] if len(texts) == 1 else BATCH_PREFIX.format(n=len(texts)) + "\n\n" + "\n\n".join(texts)
        try:
            with result_chain.triggered_by([c.event for c in fresh]):  # its background work: one hop more
                result = self._run_turn(turn_text, [c.dedupe_id for c in fresh if c.dedupe_id])
        except Exception:
            logger.exception("chat %s: the turn carrying %d result(s) failed; retrying later",
                             self.route.chat_id, len(fresh))
            self._on_batch_done(fresh, "retry")
            return
        if result.exit_reason == "error":  # the parent never took them: not acknowledged, retried later
            logger.warning("chat %s: the turn carrying %d result(s) failed (%s); retrying later",
                           self.route.chat_id, len(fresh), result.error)
            self._on_batch_done(fresh, "outage" if result.error_kind == "endpoint" else "retry")
            self._answer(result)
            return
        for item in fresh:
            item.acknowledge()
        logger.info("delivered %s to chat %s", ", ".join(c.delegation_id for c in fresh), self.route.chat_id)
        self._on_batch_done(batch, "done")
        self._answer(result)

    def _from_previous_session(self, item: Claimed) -> bool:
        """Dispatched by a session this chat left with /new (not one it compressed into this)."""
        parent = item.event.get("parent_session_id")
        current = self.conversation.session_id
        return bool(parent) and parent != current and self.conversation.store.live_tip(parent) != current

    def _apply_new_session_policy(self, batch: list[Claimed]) -> list[Claimed]:
        stale = [c for c in batch if self._from_previous_session(c)]
        if self._on_new_session == "deliver" or not stale:
            return batch
        for item in stale:
            item.drop("the chat started a new session (/new) and gateway.on_new_session is drop")
        return [c for c in batch if c not in stale]


def _header(item: Claimed, from_previous_session: bool) -> str:
    label = f"Background result {item.delegation_id} ({event_state(item.event)})"
    return label + f" from previous session {item.event.get('parent_session_id')}" if from_previous_session else label
