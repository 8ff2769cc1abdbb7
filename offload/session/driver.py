"""Drives one session for a frontend: user turns, injected results, waiting for background work.

``SessionDriver`` is shared by ``offload chat``, ``offload run`` and the demo. It owns the
inject protocol: print the landed result, run it as a NEW turn (its rendered notification is
the user-role message), and acknowledge the claim only after that turn is stored; a failed
injection gives the result back to the bus.

Invariant: the driver never injects while a turn runs — it is called from the one loop that
owns the conversation, between turns.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any, Callable

from offload.agent.run_state import unknown_usage_note
from offload.context import result_chain
from offload.cli import exit_codes
from offload.cli.result_summary import task_lines
from offload.cli.views import Ui
from offload.session.conversation import Conversation, TurnResult, open_conversation
from offload.engine.states import LIVE_STATES
from offload.cli.exit_codes import ExitCode
from offload.session.inbox import Delivery, SessionInbox
from offload.runtime import Offload
from offload.render.state_style import TRUNCATED_MARK
from offload.render.truncation import unfinished_reason
from offload.session.units import WAITING_STATES, SessionRows, item as ledger_item
from offload.subagents.usage import roll_up_event

logger = logging.getLogger(__name__)

POLL_S = 0.2
SESSION_HISTORY_ROWS = 200  # settled rows /agents searches for this session's own


def start_session(off: Offload, resume: str | None = None, *, sync_delegation: bool = False,
                  ui: Ui | None = None, wakeable: bool = False) -> SessionDriver:
    """Open the session store of ``off``'s home and the session (new, or ``resume``), whose
    agent delegates through ``off``. ``wakeable``: one request on a stateless channel whose
    session can be woken later by id."""
    store = off.session_store()
    conversation = open_conversation(off, store, resume, sync_delegation=sync_delegation, wakeable=wakeable)
    driver = SessionDriver(off, conversation, SessionInbox(conversation.session_id, store, off), ui or Ui(),
                           lambda: open_conversation(off, store, sync_delegation=sync_delegation, wakeable=wakeable))
    if wakeable:  # one request: it exits once its own results are in, so it adopts only its session's queued units
        off.admission.adopts = lambda row: bool(set(store.lineage(driver.session_id)) & {
            row.origin_session, row.parent_session_id, row.origin_session_id})
    return driver


class SessionDriver:
    def __init__(self, off: Offload, conversation: Conversation, inbox: SessionInbox, ui: Ui,
                 new_conversation: Callable[[], Conversation] | None = None) -> None:
        self.runtime = off
        self.conversation = conversation
        self.inbox = inbox
        self.ui = ui
        self.exit_code = ExitCode.OK  # the first failure of this process's turns (what `offload run` exits with)
        # What this process's turns answered (``text``, ``exit_reason``, ``error``, ``in_reply_to``: the
        # delegation whose result the turn answered, null for a prompt) and the results it
        # delivered, in order: ``offload run --json`` prints them.
        self.answers: list[dict[str, Any]] = []
        self.delivered: list[dict[str, Any]] = []
        self._new_conversation = new_conversation
        self._ledger_rows = SessionRows(lambda: self.runtime.ledger())

    def new_session(self) -> str:
        """/new: a fresh session (a user boundary, not a continuation: no lineage link).

        Results of the previous session stay with it (pending, delivered on its resume); one
        that was already claimed is refused at injection (see ``inject``), never delivered here.
        """
        if self._new_conversation is None:
            raise RuntimeError("this driver cannot start a new session")
        previous = self.session_id
        self.conversation = self._new_conversation()
        self.inbox.follow(self.session_id)
        self.ui.say(f"new session {self.session_id}; results of {previous} stay with it "
                    f"(offload chat --resume {previous})", style="dim")
        return self.session_id

    @property
    def session_id(self) -> str:
        return self.conversation.session_id

    def user_turn(self, text: str, on_wait: Callable[[], None] | None = None) -> TurnResult:
        result = self.conversation.run_turn(text, on_wait=on_wait)
        self.inbox.follow(self.session_id)  # compression may have moved the session on
        self.show_turn(result)
        return result

    def show_turn(self, result: TurnResult, in_reply_to: str | None = None) -> None:
        self.answers.append({"text": result.answer, "exit_reason": result.exit_reason, "error": result.error,
                             "in_reply_to": in_reply_to})
        if result.compressed_from:
            self.ui.say(f"(context compressed: session {result.compressed_from} continues as {self.session_id})",
                        style="dim")
        self.ui.handles(result.handles)
        self._note_inline_results(result.handles)
        self._note_outcome(exit_codes.for_turn(result.exit_reason, result.error_kind))
        if result.exit_reason == "error":
            self.ui.error(f"agent error: {result.error}")
            if result.answer:
                self.ui.answer(result.answer)
            return
        if result.exit_reason == "interrupted":
            self.ui.warn("(turn interrupted)")
        self.ui.answer(result.answer)
        unfinished = unfinished_reason(result.exit_reason, result.finish_reason)
        if unfinished:
            self.ui.warn(f"(the answer above is incomplete: {unfinished})")

    def _note_inline_results(self, handles: list[dict[str, Any]]) -> None:
        """Subagents that ran inside the turn (``--sync``, or inline at capacity) and stopped
        unfinished: warned about, one line each, and the exit code a truncated reply gets."""
        for handle in handles:
            entries = [e for e in handle.get("results") or handle.get("inline_results") or [] if isinstance(e, dict)]
            if exit_codes.for_result(entries) != ExitCode.INCOMPLETE:  # as for a delivered result
                continue
            self._note_outcome(ExitCode.INCOMPLETE)
            cut = [line for line in task_lines({"results": entries, "goals": handle.get("goals") or []})
                   if line.startswith(TRUNCATED_MARK)]
            self.ui.warn(f"⚠ {len(cut)} of {len(entries)} subagent(s) that ran inside the turn stopped unfinished "
                         "(TRUNCATED): their answers may be incomplete")
            for line in cut:
                self.ui.warn(f"  {line}")

    def _note_outcome(self, code: ExitCode) -> None:
        if self.exit_code == ExitCode.OK or code == ExitCode.INTERRUPTED:
            self.exit_code = code

    def deliver_ready(self, on_wait: Callable[[], None] | None = None) -> int:
        """Inject every result that has landed for this session; returns how many."""
        items = self.inbox.poll()
        for item in items:
            self.inject(item, on_wait)
        return len(items)

    def inject(self, item: Delivery, on_wait: Callable[[], None] | None = None) -> None:
        self.inbox.follow(self.session_id)
        if not self.inbox.owns(item.event):  # /new (or a switch) raced this delivery: not for this session
            self.inbox.give_back(item)
            return
        self.ui.result(item.event, item.text)
        try:
            with result_chain.triggered_by([item.event]):  # background work it starts counts one hop more
                result = self.conversation.run_turn(item.text, [item.dedupe_id] if item.dedupe_id else [], on_wait)
            self.inbox.follow(self.session_id)
        except Exception as exc:
            logger.exception("injecting delegation %s failed", item.delegation_id)
            self._retry_later(item, f"could not inject result {item.delegation_id} ({exc})", outage=False)
            return
        if result.exit_reason == "error":  # the parent never took it: not acknowledged, offered again later
            self.show_turn(result, in_reply_to=item.delegation_id)
            self._retry_later(item, f"the turn on result {item.delegation_id} failed",
                              outage=result.error_kind == "endpoint")
            return
        self.inbox.acknowledge(item)
        if item.dedupe_id:  # the result itself, not an interim notice: its children count once, now
            roll_up_event(self.conversation.agent, item.event)
            self._note_outcome(exit_codes.for_event(item.event))
            self.delivered.append(item.event)
        self.show_turn(result, in_reply_to=item.delegation_id)

    def _retry_later(self, item: Delivery, what: str, *, outage: bool) -> None:
        delay_s = self.inbox.retry_later(item, outage=outage)
        if delay_s is None:
            self.ui.error(f"{what}; it is not offered again (see `offload inbox --all`)")
            return
        spent = "" if outage else "; one delivery attempt spent"
        self.ui.error(f"{what}; the result stays pending (not acknowledged{spent}) and is offered again "
                      f"in {delay_s:g} s, or on `offload chat --resume {self.session_id}`")

    def usage_line(self) -> str | None:
        """Tokens (and cost, when the provider reports one) of this process's turns, with the
        subagents whose results were delivered here (or that ran inline) included."""
        totals = getattr(self.conversation.agent, "usage_totals", None)
        unknown = unknown_usage_note(totals) if isinstance(totals, dict) else None
        if not isinstance(totals, dict) or not (totals.get("input_tokens") or totals.get("output_tokens") or unknown):
            return None
        cost = totals.get("cost_usd")
        cost_text = f"cost ${cost:.4f}" if isinstance(cost, (int, float)) else "cost not reported by the provider"
        unknown = f"; {unknown}" if unknown else ""
        return (f"tokens used by this run: {totals['input_tokens']:,} in / {totals['output_tokens']:,} out, "
                f"subagents included ({cost_text}{unknown})")

    def units(self) -> list[dict[str, Any]]:
        """This session's background units as the engine lists them (live per-child activity),
        each live one with ``children_finished``: its children already recorded in the ledger,
        by task index; then the ones another process runs (an ``offload worker``), from the
        ledger, each with ``where`` it is. Units this process holds in its admission queue are
        read first: one leaves that queue only once it is on the engine's roster, so reading in
        this order never misses a unit starting in between."""
        queued_here = self.runtime.admission.items()
        items = [item for item in self.runtime.engine.list() if self.inbox.owns(item)]
        listed = {item.get("delegation_id") for item in items}
        items += [item for item in queued_here if item["delegation_id"] not in listed and self.inbox.owns(item)]
        for item in items:
            if item.get("status") in LIVE_STATES:
                row = self.runtime.deliveries.get(str(item.get("delegation_id"))) or {}
                entries = (row.get("result") or {}).get("results") or []
                item["children_finished"] = {e["task_index"]: e for e in entries
                                             if isinstance(e, dict) and isinstance(e.get("task_index"), int)}
        known = {item.get("delegation_id") for item in items}
        elsewhere = [row for row in self._session_rows() if row.state in WAITING_STATES and row.delegation_id not in known]
        if elsewhere:
            from offload.owner.activity import remote_views

            live = remote_views(self.runtime.ledger(), [row.delegation_id for row in elsewhere])
            items.extend(ledger_item(row, live.get(row.delegation_id)) for row in elsewhere)
        return items

    def _session_rows(self) -> list[Any]:
        """This session's undelivered ledger rows that another process runs or ran."""
        return self._ledger_rows.rows(self.conversation.store.lineage(self.session_id))

    def ledger_units(self) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        """This session's delegations in the ledger that this process does not hold in memory
        (it was resumed, or another process runs them): running, awaiting delivery, settled,
        queued."""
        from offload.views.ledger import LedgerView

        sessions = set(self.conversation.store.lineage(self.session_id))
        held = {str(item.get("delegation_id")) for item in self.units()}  # already on the live roster (or queued here)
        view = LedgerView(self.runtime.ledger())

        def mine(rows: list[Any]) -> list[Any]:
            return [row for row in rows if row.delegation_id not in held
                    and sessions & {row.parent_session_id, row.origin_session, row.origin_session_id}]
        return (mine(view.running()), mine(view.pending()), mine(view.settled(SESSION_HISTORY_ROWS)),
                mine(view.queued()))

    def live_count(self) -> int:
        """Background units of this session that have not reported yet, here or elsewhere."""
        return sum(1 for item in self.units() if item.get("status") in LIVE_STATES | WAITING_STATES)

    def outstanding_count(self) -> int:
        """Results this session still waits for: units that have not reported, and results that
        another process produced and no consumer has delivered yet (on their way here)."""
        known = {item.get("delegation_id") for item in self.units()} | self.inbox.held
        undelivered = [row for row in self._session_rows() if row.state not in WAITING_STATES
                       and row.delegation_id not in known]
        return self.live_count() + len(undelivered)

    def stop_background(self, reason: str = "stopped by the user") -> int:
        """Interrupt this session's background work, including what it dispatched before a
        context compression moved it to its current id."""
        stopped = 0
        lineage = set(self.conversation.store.lineage(self.session_id))
        for sid in lineage:
            stopped += self.runtime.engine.interrupt_session(session_key=sid, parent_session_id=sid, reason=reason)
        # Units still queued never start: each is reported stopped at once, wherever it was queued.
        stopped += self.runtime.admission.cancel(
            lambda row: bool(lineage & {row.origin_session, row.parent_session_id, row.origin_session_id}), reason)
        self._ledger_rows.forget()
        return stopped + self._stop_elsewhere()

    def _stop_elsewhere(self) -> int:
        """Ask the processes running this session's units elsewhere (workers) to stop them
        (one still queued was stopped here already)."""
        from offload.owner import control_requests
        from offload.ledger import LedgerError

        asked = 0
        self._ledger_rows.forget()  # a Ctrl-C may have cut the last read short: ask the ledger now
        for item in self.units():
            if item.get("where") and item.get("status") == "running":
                try:
                    control_requests.request(self.runtime.ledger(), str(item["delegation_id"]))
                    asked += 1
                except LedgerError as exc:
                    self.ui.error(f"could not ask the worker to stop {item['delegation_id']}: {exc}")
        return asked

    def wait_for_background(self, on_wait: Callable[[], None] | None = None,
                            announce: Callable[[int], None] | None = None) -> bool:
        """Inject results until nothing of this session is running or queued.

        The first Ctrl-C stops the running subagents (their partial results are still
        delivered); a second one returns at once. True if everything was delivered.
        ``announce(live)`` says what is awaited. A Ctrl-C only counts (the handler does nothing
        else) and is acted on at the top of the loop, so one that arrives while the previous is
        acted on, or while ``announce`` prints, still counts.
        """
        ctrl_c = _CtrlCCounter()
        acted = 0
        with ctrl_c:
            while True:
                try:
                    if ctrl_c.count > acted:
                        acted = ctrl_c.count
                        if not self._act_on_ctrl_c(acted):
                            return False
                    live = self.outstanding_count()  # read BEFORE polling: a unit queues its event before it stops being live
                    if announce is not None:
                        announce, say = None, announce
                        say(live)
                    if not self.deliver_ready(on_wait) and not live:
                        return True
                    if on_wait is not None:
                        on_wait()
                    time.sleep(POLL_S)
                except KeyboardInterrupt:  # the second Ctrl-C, or one that came before the counter was in place
                    ctrl_c.count += 1

    def _act_on_ctrl_c(self, count: int) -> bool:
        """The first Ctrl-C stops this session's subagents; a later one leaves (False)."""
        self._note_outcome(ExitCode.INTERRUPTED)
        if count > 1:
            from offload.owner.handover import hand_over

            handed = hand_over(self.runtime)  # what the first Ctrl-C did not stop goes on without us
            went_on = f"; {len(handed)} still running go on in this home's background worker" if handed else ""
            self.ui.warn(f"leaving now: unfinished results stay in the ledger{went_on} and are delivered on "
                         f"`offload chat --resume {self.session_id}`")
            return False
        stopped = self.stop_background()
        self.ui.warn(f"stopping {stopped} background delegation(s); Ctrl-C again to leave at once")
        return True


class _CtrlCCounter:
    """While a wait runs (on the main thread), the first Ctrl-C only counts: no KeyboardInterrupt
    cuts a ledger read or write in the middle (a PostgreSQL connection cut mid-query can hang the
    next request for the pool's timeout), and the wait acts on it at the top of its loop. A second
    one raises KeyboardInterrupt, so even a wait stuck in a call can be left at once."""

    def __init__(self) -> None:
        self.count = 0
        self._installed, self._previous = False, None

    def __enter__(self) -> _CtrlCCounter:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.count >= 1:
            raise KeyboardInterrupt
        self.count += 1

    def __exit__(self, *exc: Any) -> None:
        if self._installed:  # a previous handler of None (installed outside Python) means the default
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler)
