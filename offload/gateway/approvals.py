"""Subagents' approval requests (``delegation.approvals: ask``) as chat messages with buttons.

``GatewayApprovals.sweep`` (every ``POLL_S``, on the gateway's approvals thread) reads the
ledger's pending requests, finds each one's chat -- the origin of its delegation: a chat of
this platform that the gateway serves -- and sends it there once: what the subagent wants to
run, why it needs a person, when no answer denies it, and two buttons, Approve and Deny. A press
(``on_press``) from that chat decides the request through ``offload.subagents.approvals.decide``
as ``<platform>:<user>``, answers the press and edits the message to say who decided (the
buttons go). A request decided anywhere else (``offload approvals``, another surface, the
timeout) has its message edited on the next sweep, so no live buttons are left on a settled
request; a press on one is answered with what happened.

Invariants: a request is sent to its chat at most once, also across restarts (the message ids
are in the gateway state until the request is settled); a press decides only a request of the
chat it came from; nothing here raises into the poll loop (a failed sweep is logged and tried
again). Anyone who can write in an allowed chat can answer its requests, as they can talk to
its agent, unless the platform's user allow-list names who may (``decides``).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from offload.gateway.platform import Incoming, Platform, Route

if TYPE_CHECKING:
    from offload.origin import Origin

logger = logging.getLogger(__name__)
POLL_S = 1.0  # how often pending requests are read; a child waits minutes for an answer
PREFIX = "apr:"  # button data: apr:<request id>:allow|deny (Telegram allows 64 bytes)
HEADER = "Approval needed"
_SHOWN = "approvals_shown"  # gateway state: request id -> [chat id, thread id, message id]


class GatewayApprovals:
    def __init__(self, platform: Platform, ledger: Callable[[], Any], state: Any,
                 serves: Callable[[str], bool], decides: Callable[[str], bool] = lambda user_id: True) -> None:
        """``ledger()``: the runtime's ledger (per use); ``state``: the gateway state;
        ``serves(chat_id)``: whether the chat is allowed here; ``decides(user_id)``: whether that
        user may answer (the platform's user allow-list; by default anyone in a served chat)."""
        self.platform, self.ledger, self.state, self.serves = platform, ledger, state, serves
        self.decides = decides
        self._lock = threading.Lock()  # one sweep or press at a time: a request is sent once
        self._foreign: set[str] = set()  # pending requests of other surfaces: not looked up again

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(POLL_S):
            self.sweep()

    # -- requests to chats ------------------------------------------------------------------------
    def sweep(self) -> int:
        """Send new pending requests to their chats and settle the messages of decided ones;
        how many were sent. Never raises."""
        from offload.subagents import approvals

        try:
            with self._lock:
                ledger = self.ledger()
                pending = {row["request_id"]: row for row in approvals.pending(ledger)}
                shown = dict(self.state.read().get(_SHOWN) or {})
                for request_id, where in shown.items():
                    if request_id not in pending:
                        self._settle_message(request_id, where, approvals.get(ledger, request_id))
                self._foreign &= set(pending)
                return sum(self._show(ledger, row) for rid, row in pending.items()
                           if rid not in shown and rid not in self._foreign)
        except Exception:
            logger.warning("showing approval requests in %s chats failed; trying again", self.platform.name,
                           exc_info=True)
            return 0

    def _show(self, ledger: Any, row: dict[str, Any]) -> int:
        origin = self._origin(ledger, row)
        if origin is None:
            self._foreign.add(row["request_id"])  # a CLI session's, another platform's, a chat not served here
            return 0
        route = Route(origin.chat_id, origin.thread_id)
        request_id = row["request_id"]
        ids = self.platform.send(route, request_text(row), header=HEADER,
                                 buttons=[("Approve", f"{PREFIX}{request_id}:allow"),
                                          ("Deny", f"{PREFIX}{request_id}:deny")])
        self.state.update(lambda data: data.setdefault(_SHOWN, {}).__setitem__(
            request_id, [route.chat_id, route.thread_id, ids[-1] if ids else ""]))
        return 1

    def _origin(self, ledger: Any, row: dict[str, Any]) -> Origin | None:
        unit = ledger.get(row["delegation_id"]) if row.get("delegation_id") else None
        origin = unit.origin if unit is not None else None
        if origin is None or origin.platform != self.platform.name or not self.serves(origin.chat_id):
            return None
        return origin

    def _settle_message(self, request_id: str, where: list[str], row: dict[str, Any] | None) -> None:
        chat_id, thread_id, message_id = (list(where) + ["", "", ""])[:3]
        if message_id:
            try:
                self.platform.edit(Route(chat_id, thread_id), message_id, settled_text(request_id, row),
                                   header=HEADER)
            except Exception as exc:  # the request is settled either way; only the old buttons stay
                logger.warning("could not update approval message of %s: %s", request_id, exc)
        self.state.update(lambda data: (data.get(_SHOWN) or {}).pop(request_id, None))

    # -- presses ----------------------------------------------------------------------------------
    def on_press(self, press: Incoming) -> None:
        """A person pressed a button under a message of ours. Never raises."""
        request_id, _, choice = press.button[len(PREFIX):].rpartition(":")
        if not press.button.startswith(PREFIX) or choice not in ("allow", "deny"):
            self._answer(press, "This button is not offload's (or is from an older version); nothing was done.")
            return
        try:
            with self._lock:
                self._answer(press, self._decide(press, request_id, choice == "allow"))
        except Exception:
            logger.warning("answering approval button %s failed", press.button, exc_info=True)
            self._answer(press, "Could not record the answer here; use `offload approvals` on the host.")

    def _decide(self, press: Incoming, request_id: str, allow: bool) -> str:
        """Decide the request for ``press``'s chat; the answer shown to the person who pressed."""
        from offload.subagents import approvals

        ledger = self.ledger()
        row = approvals.get(ledger, request_id)
        origin = self._origin(ledger, row) if row is not None else None
        if origin is None or (origin.chat_id, origin.thread_id) != (press.route.chat_id, press.route.thread_id):
            return f"Request {request_id} is not one of this chat's; nothing was done."
        if not self.decides(press.user_id):
            return f"{press.user_name or press.user_id} may not decide requests here; nothing was done."
        by = f"{self.platform.name}:{press.user_name or press.user_id or 'unknown'}"
        try:
            row = approvals.decide(ledger, request_id, allow, by)
            answer = f"{'Approved' if allow else 'Denied'} ({request_id})"
        except approvals.ApprovalError as exc:  # decided already: elsewhere, by the timeout, a second press
            row, answer = approvals.get(ledger, request_id), str(exc)
        where = (self.state.read().get(_SHOWN) or {}).get(request_id)
        self._settle_message(request_id, where or [press.route.chat_id, press.route.thread_id, press.message_id], row)
        return answer

    def _answer(self, press: Incoming, text: str) -> None:
        try:
            self.platform.answer_button(press.press_id, text)
        except Exception as exc:
            logger.warning("could not answer a button press in chat %s: %s", press.route.chat_id, exc)


def request_text(row: dict[str, Any]) -> str:
    """The chat message of a pending request (plain text: the command is the child's, untrusted)."""
    child = row.get("child")
    who = f"task {int(child) + 1} of {row.get('delegation_id')}" if isinstance(child, int) else str(row.get("delegation_id"))
    until = time.strftime("%H:%M:%S UTC", time.gmtime(float(row.get("expires_at") or 0)))
    reasons = "; ".join(str(r) for r in row.get("reasons") or []) or ", ".join(row.get("categories") or [])
    return (f"A background subagent ({who}) wants to run:\n\n{row.get('command')}\n\nIt needs a person's approval: "
            f"{reasons}.\nIt waits for an answer until {until}; no answer by then denies it. "
            f"Request {row.get('request_id')}.")


def settled_text(request_id: str, row: dict[str, Any] | None) -> str:
    if row is None:
        return f"Request {request_id} is gone from the ledger; nothing more to decide."
    state, by = row.get("state"), row.get("decided_by") or "?"
    outcome = {"allowed": f"approved by {by}: the subagent runs the command",
               "denied": f"denied by {by}: the command did not run",
               "timed_out": "nobody answered in time, which denies: the command did not run"}.get(str(state), str(state))
    return f"Request {request_id} ({row.get('command')}): {outcome}."
