"""One MCP namespace's view of an ``Offload``: dispatch a ``delegate_task`` call, and read,
wait for, list and stop the delegations it started, all from the ledger.

Invariants:
- every delegation belongs to a namespace (which one a request has is ``namespaces``'s
  decision), stored as its origin session key (``mcp:<namespace>``); every read, id prefixes
  included, sees only rows of that namespace (``all_namespaces`` lifts the filter for an
  operator), so an unrelated client can neither see nor touch them; a scope whose token was
  revoked reads nothing (``Scope.check``);
- what a caller reads comes from the ledger, never from this process's memory, so an id
  dispatched by a server that was killed is answered by the next one (its row is recovered,
  finished children keep their real results), never "no such delegation";
- a result is acknowledged (``delivered``) only when it was handed over in full;
- bad input raises ``McpInputError`` whose text names the fix; nothing here raises for a
  delegation's own failure (that is its ``state``).
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import anyio.to_thread

from offload.owner import control_requests
from offload.views import rows as ledger_rows, result as result_doc
from offload.context.approval import (
    reset_current_session_key, reset_no_ask_reason, set_current_session_key, set_no_ask_reason,
)
from offload.context.session_env import clear_session_env, reset_session_env, set_async_delivery
from offload.engine.loop import Loop
from offload.engine.states import ACTIVE_STATES, QUEUED, RUNNING, UNFINISHED, unit_state
from offload.errors import CliError
from offload.ids import resolve
from offload.ledger import LedgerRow
from offload.views.ledger import LedgerView
from offload.mcp_server.watcher import Watcher
from offload.render.resumed import resume_note
from offload.runtime import Offload
from offload.subagents.admission import SYNC_OPTION
from offload.subagents.approvals import pending as approvals_pending

SESSION_PREFIX = "mcp:"
LISTED_MAX = 1000  # settled rows read when resolving an id or listing a namespace
COLLECT_NOTE = ("Running in the background; nothing is pushed to you over MCP. Collect the result with "
                "delegation_result(delegation_id=..., wait_s=...) (it waits up to wait_s seconds and returns "
                "early when the subagents finish), or check progress with delegation_status. Carry on with "
                "other work meanwhile.")

# (progress, total, message): starting is one step and each child done one more, so the value
# only grows (MCP's rule) from a queued unit (0) through its start (1) to its last child.
AsyncProgress = Callable[[int, int, str], Awaitable[None]]
ECHO_MAX_CHARS = 200  # a goal echoed in a handle, a status or a list row
FALLBACK_S = 30.0  # a wait re-reads its row at least this often, whatever the watcher says
QUEUED_NOTE = "queued: every background slot is busy; it starts by itself when one frees"


def _in_home(workspace: Path, home: Path) -> bool:
    resolved, home = Path(os.path.realpath(workspace)), Path(os.path.realpath(home))
    return resolved == home or resolved.is_relative_to(home)


class McpInputError(ValueError):
    """A tool call the server cannot act on; the text says what to change."""


@dataclass(frozen=True)
class Scope:
    """Who is asking: their namespace, or every namespace (``namespace`` None); over HTTP the
    token's name and ``live``, whether the token is still accepted (``mcp_server.namespaces``)."""

    namespace: str | None
    token: str | None = None
    live: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def session_key(self) -> str:
        return SESSION_PREFIX + (self.namespace or "operator")

    def check(self) -> None:
        """Refuse a request whose token was revoked or rotated since it arrived (a long wait)."""
        if self.live is not None and not self.live():
            raise McpInputError(f"the token {self.token!r} this request was made with has been revoked or rotated; "
                                "ask the operator for a new one (`offload token add NAME`) and reconnect with it")

    def sees(self, row: LedgerRow) -> bool:
        if self.namespace is None:
            return row.origin_session.startswith(SESSION_PREFIX)
        return row.origin_session == self.session_key


class McpDelegations:
    """See the module docstring. ``off``: the runtime; ``build_parent(workspace)``: the agent
    whose endpoint, toolsets and workspace the children inherit (None: the default workspace);
    one is built per workspace and never run."""

    def __init__(self, off: Offload, build_parent: Callable[[Path | None], Any]) -> None:
        self.off, self.build_parent = off, build_parent
        self._parents: dict[Path | None, Any] = {}
        self._parents_lock = threading.Lock()
        self._cancelling: set[str] = set()  # ids stopped through this server
        self.view = LedgerView(off.ledger())
        # Nobody else reads this process's completion bus: each event only wakes the waiters
        # (what they hand over is read from the ledger, where the event was recorded first).
        self.watcher = Watcher(self._fingerprint, off.bus.completion_queue).start(off.ledger())
        self._recover()  # rows a killed server left running
        # ... and, while it serves, the units of owners that die meanwhile (another server, a
        # `run` killed on this home; across hosts a lease run out), as chat and the worker do.
        self.recovery = Loop("offload-mcp-recovery", self._recover_step,
                             lambda: off.engine.policy().claim_check_interval_s, what="recovery of dead owners' units")
        self.recovery.start()

    def close(self) -> None:
        """Stop looking for dead owners' units and end the waits (the server is leaving)."""
        self.recovery.stop()
        self.watcher.close()

    def _recover_step(self, _now: float) -> bool:
        self._recover()
        return True

    def _recover(self) -> None:
        """Settle what dead owners left; a long-lived server resumes their resumable units
        (``delegation.resume: auto``: requeued, then started here like any queued unit)."""
        before = self.off.deliveries.requeued
        self.off.deliveries.recover_abandoned(resuming=True)
        if self.off.deliveries.requeued != before:
            self.off.admission.pump(foreign=True)

    # -- what a wait watches ----------------------------------------------------------------------
    def _fingerprint(self) -> tuple[Any, ...]:
        """The unfinished rows' states and the pending approval requests: a change of either
        wakes the waiters (a child done, a row finished anywhere, a command waiting)."""
        rows = [*self.view.queued(), *self.view.running()]
        asks = [r.get("request_id") for r in approvals_pending(self.off.ledger())]
        return tuple(sorted((r.delegation_id, r.state, r.updated_at) for r in rows)), tuple(asks)

    # -- dispatch ---------------------------------------------------------------------------------
    def parent(self, workspace: Path | None = None) -> Any:
        with self._parents_lock:
            if workspace not in self._parents:
                self._parents[workspace] = self.build_parent(workspace)
            return self._parents[workspace]

    def delegate(self, scope: Scope, arguments: dict[str, Any], workspace: Path | None = None,
                 no_ask_reason: str | None = None) -> dict[str, Any]:
        """Start ``arguments`` (delegate_task's: ``goal`` or ``tasks``, ``context``, ``toolsets``)
        in the background for ``scope``, children working in ``workspace`` (None: the default);
        the handle, with the note on how to collect it. ``no_ask_reason``: why the client cannot
        answer its subagents' approval requests (no elicitation), which ``ask`` then denies."""
        scope.check()
        if scope.namespace is None:
            raise McpInputError("an --all-namespaces server only reads and stops delegations; start one from a "
                                "server with a namespace (drop --all-namespaces)")
        if workspace is not None and _in_home(workspace, self.off.home):
            raise McpInputError(f"the workspace {workspace} (the client's root) is offload's own home {self.off.home} or "
                                "lies inside it, where no agent may work: open the project folder as the root, or "
                                "start the server with --workspace DIR")
        parent = self.parent(workspace)
        session = set_current_session_key(scope.session_key)
        asking = set_no_ask_reason(no_ask_reason)
        clear_session_env()  # no HERMES_SESSION_* of the server's environment routes these results
        set_async_delivery(True)  # results stay in the ledger for delegation_result, never run inline
        try:
            handle = json.loads(self.off.delegate_tool(**arguments, background=True, parent_agent=parent))
        finally:
            reset_no_ask_reason(asking)
            reset_current_session_key(session)
            reset_session_env()
        if handle.get("status") == "error":
            raise McpInputError(without_sync_option(str(handle.get("error"))))
        handle["note"] = COLLECT_NOTE
        if "goals" in handle:
            handle["goals"] = [clip(g) for g in handle["goals"]]
        return {k: clip(v) if k == "goal" else v for k, v in handle.items()}

    # -- reads ------------------------------------------------------------------------------------
    def rows(self, scope: Scope) -> list[LedgerRow]:
        scope.check()
        rows = [*self.view.queued(), *self.view.running(), *self.view.pending(), *self.view.settled(LISTED_MAX)]
        seen: dict[str, LedgerRow] = {}
        for row in rows:
            if scope.sees(row):
                seen.setdefault(row.delegation_id, row)
        return sorted(seen.values(), key=lambda r: r.dispatched_at, reverse=True)

    def find(self, scope: Scope, wanted: Any) -> LedgerRow:
        """The row ``wanted`` (an id or a unique prefix) names in ``scope``; a dead owner's
        running row is recovered first."""
        if not isinstance(wanted, str) or not wanted.strip():
            raise McpInputError("delegation_id is required: pass the id delegate_task returned (a unique prefix is "
                                "enough); list_delegations lists them")
        scope.check()
        exact = self.view.get(wanted.strip())
        rows = [exact] if exact is not None and scope.sees(exact) else self.rows(scope)
        try:
            full_id = resolve(wanted, (r.delegation_id for r in rows), kind="delegation", id_prefix="deleg_",
                              listing="list_delegations")
        except CliError as exc:
            raise McpInputError(str(exc)) from None
        row = self.view.get(full_id)
        if row is not None and row.state == "running" and control_requests.owner_gone(self.off.ledger(), row):
            self._recover()
            row = self.view.get(full_id)
        if row is None:
            raise McpInputError(f"delegation {full_id} vanished from the ledger (pruned?); list_delegations lists "
                                "what is left")
        return row

    def status(self, row: LedgerRow, text: bool = False) -> dict[str, Any]:
        """The result document (``offload.views.result``: ``state``, ``children``, delivery, and with
        ``text`` what the agent reads) plus what an MCP client polls for: ``delegation_id``,
        children done/total, ``delivered``, the owner, and each running child's API calls,
        current tool and idle seconds (published by its owner)."""
        doc = result_doc.from_row(row, self.off.render if text else _no_text).to_json()
        live = ledger_rows.record(row, self.view.activity([row]).get(row.delegation_id), self.off.ledger())
        for child, seen in zip(doc["children"], live["children"]):
            if child["state"] == RUNNING:
                child.update(api_calls=seen.get("api_calls"), current_tool=seen.get("current_tool"),
                             seconds_since_activity=seen.get("seconds_since_activity"))
        done, total = _progress(doc)
        doc["label"] = clip(doc.get("label"))
        for child in doc["children"]:
            child["goal"] = clip(child.get("goal"))
        return {**doc, "delegation_id": row.delegation_id, "children_done": done, "children_total": total,
                "delivered": row.delivery_state == "delivered", "owner_pid": row.owner_pid, "owner": live["owner"]}

    async def wait(self, scope: Scope, wanted: Any, wait_s: float, progress: AsyncProgress | None = None,
                   asked: Callable[[str], bool] | None = None) -> LedgerRow:
        """The row, once it left the live states, ``wait_s`` passed or the server shuts down;
        ``progress`` is told each change: queued, started, and each child done (``wait_step``);
        it ends early once ``asked(id)``: an approval request of the unit waits for the client
        (``mcp_server.approvals``). The wait sleeps on the shared watcher, holding no thread
        (reads run on one briefly)."""
        deadline = time.monotonic() + max(0.0, wait_s)
        last, wanted_id = None, wanted
        self.watcher.waiting(1)
        try:
            while True:
                armed = self.watcher.armed()  # before the read: a change after it still wakes us
                row, step, ask = await anyio.to_thread.run_sync(lambda: self._look(scope, wanted_id, asked))
                wanted_id = row.delegation_id
                if row.state not in UNFINISHED:
                    if progress is not None and last is not None:
                        await progress(last[1], last[1], f"finished: {unit_state(row.state)}")  # reaches its total
                    return row
                if progress is not None and step != last:
                    await progress(*step)
                    last = step
                remaining = deadline - time.monotonic()
                if ask or remaining <= 0 or self.watcher.closing:
                    return row
                with anyio.move_on_after(min(remaining, FALLBACK_S)):
                    await armed.wait()
        finally:
            self.watcher.waiting(-1)

    def _look(self, scope: Scope, wanted: Any, asked: Callable[[str], bool] | None
              ) -> tuple[LedgerRow, tuple[int, int, str] | None, bool]:
        seen = self._fingerprint()  # before the row: a change after this read still differs from it
        row = self.find(scope, wanted)
        if row.state not in UNFINISHED:
            return row, None, False
        self.watcher.saw(seen)
        return row, wait_step(self.status(row)), bool(asked is not None and asked(row.delegation_id))

    def result(self, row: LedgerRow) -> dict[str, Any]:
        """The status, and for a finished row the text the agent reads (``text``), which is then
        acknowledged."""
        finished = row.state not in UNFINISHED and bool(row.event)
        out = self.status(row, text=finished)
        if finished and row.delivery_state == "pending":
            self.off.deliveries.mark_delivered(row.delegation_id)
            out["delivered"] = True
        return out

    def listing(self, scope: Scope, limit: int = 50) -> list[dict[str, Any]]:
        """This scope's delegations, newest first."""
        return [{"delegation_id": r.delegation_id, "state": unit_state(r.state), "label": clip(ledger_rows.label(r)),
                 "delivered": r.delivery_state == "delivered", "dispatched_at": r.dispatched_at}
                for r in self.rows(scope)[:limit]]

    def stop(self, scope: Scope, wanted: Any) -> dict[str, Any]:
        """Stop the delegation: a queued one leaves the queue at once (it never starts; reported
        as ``interrupted``, as ``offload stop`` does), a running one is interrupted by its owner
        (this process or another); the partial result is collected with delegation_result."""
        row = self.find(scope, wanted)
        if row.state == QUEUED and self.off.admission.cancel(lambda r: r.delegation_id == row.delegation_id,
                                                             "stopped over MCP"):
            self._cancelling.add(row.delegation_id)
            row = self.view.get(row.delegation_id) or row
            return {**self.status(row), "stopped": True,
                    "note": "removed from the queue before it started; it will not run"}
        if row.state == QUEUED:
            row = self.find(scope, row.delegation_id)  # it started meanwhile: interrupt it instead
        if row.state not in ACTIVE_STATES:
            return {**self.status(row), "stopped": False,
                    "note": f"{row.delegation_id} is not running (it is {row.state}); nothing to stop"}
        control_requests.request(self.off.ledger(), row.delegation_id)
        self._cancelling.add(row.delegation_id)
        return {**self.status(row), "stopped": True,
                "note": "stop requested; collect the partial result with delegation_result"}

    def cancelling(self, delegation_id: str) -> bool:
        """Whether a stop of this delegation was asked through this server (a task then reports
        ``cancelled`` at once, never ``working`` again)."""
        return delegation_id in self._cancelling


def clip(text: Any, limit: int = ECHO_MAX_CHARS) -> Any:
    """A goal echoed back cut to ``limit`` characters (saying how much was cut); the client has it
    whole. Anything but a long string is returned unchanged."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def without_sync_option(text: str) -> str:
    """A refusal's text without the in-process tool's ``background=false`` way out, which MCP
    does not offer."""
    for option in (SYNC_OPTION, ", run this task synchronously (background=false),",
                   ", or run this task synchronously (background=false)"):
        text = text.replace(option, "," if option.endswith(",") else "")
    return text


def _progress(doc: dict[str, Any]) -> tuple[int, int]:
    kids = doc["children"]
    return sum(1 for c in kids if c["state"] not in (RUNNING, QUEUED)), len(kids)


def wait_step(doc: dict[str, Any]) -> tuple[int, int, str]:
    """A live delegation's progress as a wait reports it: (step, steps, message)."""
    done, total = _progress(doc)
    if doc["state"] == QUEUED:
        return 0, total + 1, QUEUED_NOTE
    return 1 + done, total + 1, f"running: {done}/{total} subagents done"


def status_message(doc: dict[str, Any]) -> str:
    """A live delegation in one line (a task's ``statusMessage``), saying it was resumed if it was."""
    said = QUEUED_NOTE if doc["state"] == QUEUED else f"{doc['children_done']}/{doc['children_total']} subagents done"
    note = resume_message(doc)
    return f"{said}; {note}" if note else said


def finished_message(row: LedgerRow) -> str:
    """A finished delegation in one line (a completed task's ``statusMessage``)."""
    note = resume_message(result_doc.from_row(row, _no_text).to_json())
    return f"delegation {unit_state(row.state)}" + (f"; {note}" if note else "")


def resume_message(doc: dict[str, Any]) -> str | None:
    """How a resumed delegation says so (``offload.render.resumed``): per resumed child, else the
    unit's (taken over, its children not finished yet); None when nothing was resumed."""
    kids = [f"#{c['task']} {resume_note(c['resumed'])}" for c in doc["children"] if c.get("resumed")]
    if kids:
        return "; ".join(kids)
    return resume_note(doc["resumed"]) if doc.get("resumed") else None


def _no_text(event: dict[str, Any]) -> None:
    return None  # rendering is for the reader of the result, not for every status poll
