"""Approval of subagents' risky terminal commands (``delegation.approvals``): the policy, the
durable request, the decision and the wait.

A subagent's ``run_command`` classifies its command (``offload.toolsets.command_risk``) and
asks the gate its unit carries (``ApprovalGate.check``, in the child's tool settings under
``GATE_SETTING``). For each category found the policy says ``deny``, ``allow`` or ``ask``
(``delegation.approvals_by_category`` over ``delegation.approvals``); the strictest wins.
``ask`` writes a request to the ledger (``request``) that any process of that ledger can list
(``pending``) and answer (``decide``): ``offload approvals``, the chat, the dashboard, a chat
gateway, an MCP client through elicitation. The child waits (``wait``) with its activity
clock kept moving, so the stall monitor never counts the wait; at the deadline
(``delegation.approval_timeout_s``) the request is decided ``timed_out``, which denies.

Invariants: a command runs only on ``allow`` by policy or an ``allowed`` decision; every
request and decision (who, when, what) is in the ledger's approvals table and the unit's
journal (kinds ``approval_request`` and ``approval_decision``), and in the child's
``tool_trace`` step; exactly one decision is taken per request (the ledger's conditional
update), so a late answer is told the request was already decided; where nobody can answer
(``no_ask_reason``, e.g. ``offload run`` without ``--ask-approvals``), ``ask`` denies at once
with that reason.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from offload.ledger import JournalEntry
from offload.ledger.approval_table import PENDING
from offload.toolsets.command_risk import CATEGORIES, Classification, classify
from offload.toolsets.terminal_tool import APPROVAL_GATE
from offload.toolsets.toolspec import ToolContext, ToolError

logger = logging.getLogger(__name__)

DENY, ALLOW, ASK = "deny", "allow", "ask"
MODES = (DENY, ASK, ALLOW)  # strictest first
ALLOWED, DENIED, TIMED_OUT = "allowed", "denied", "timed_out"
GATE_SETTING = APPROVAL_GATE  # a subagent's tool settings carry its gate under this key
DEFAULT_TIMEOUT_S = 300.0
POLL_S = 0.25  # how often a waiting child reads its request; an answer is seen within this


class ApprovalError(ValueError):
    """A decision that cannot be taken: an unknown request, or one already decided."""


@dataclass(frozen=True)
class ApprovalPolicy:
    mode: str = DENY
    by_category: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S

    def mode_for(self, categories: tuple[str, ...]) -> tuple[str, str | None]:
        """The strictest mode over ``categories`` and the category that set it (None: nothing found)."""
        if not categories:
            return ALLOW, None
        ranks = [MODES.index(self.by_category.get(c, self.mode)) for c in categories]
        rank = min(ranks)
        return MODES[rank], categories[ranks.index(rank)]  # the first category found at that mode

    @classmethod
    def of(cls, cfg: Any) -> ApprovalPolicy:
        """From a ``DelegationConfig``."""
        return cls(cfg.approvals, dict(cfg.approvals_by_category), float(cfg.approval_timeout_s))


def validate_by_category(value: Mapping[str, str]) -> dict[str, str]:
    """``delegation.approvals_by_category``: known categories to deny|allow|ask (ValueError names the fix)."""
    result = {}
    for category, mode in dict(value).items():
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; the categories are: {', '.join(CATEGORIES)}")
        if mode not in MODES:
            raise ValueError(f"{category}: {mode!r} is not a mode; use deny, allow or ask")
        result[category] = mode
    return result


# -- the durable request: any process on the ledger lists and answers it ---------------------
def request(ledger: Any, *, command: str, found: Classification, session_key: str, delegation_id: str | None,
            child: int | None, timeout_s: float, now: float | None = None) -> dict[str, Any]:
    """Write a pending request; returns it (``request_id``, ``expires_at`` …)."""
    now = time.time() if now is None else now
    row = {"request_id": "apr_" + uuid.uuid4().hex[:10], "delegation_id": delegation_id, "session_key": session_key,
           "child": child, "command": command, "categories": list(found.categories), "reasons": found.reasons(),
           "requested_at": now, "expires_at": now + timeout_s, "owner": f"{os.getpid()}@{socket.gethostname()}"}
    ledger.add_approval(row)
    _journal(ledger, row, "approval_request", command=command[:2000], categories=row["categories"],
             reasons=row["reasons"], request_id=row["request_id"], expires_at=row["expires_at"])
    return {**row, "state": PENDING}


def pending(ledger: Any, session: str | None = None) -> list[dict[str, Any]]:
    """The requests waiting for an answer, oldest first (of one session when given)."""
    return ledger.approvals(session_key=session, pending_only=True)


def find_pending(ledger: Any, wanted: str) -> str:
    """The id of the pending request ``wanted`` names (its id or a unique prefix); ``wanted``
    itself when none matches (``decide`` then says why). ``ApprovalError`` when several match."""
    matches = [r["request_id"] for r in pending(ledger) if r["request_id"].startswith(wanted)]
    if len(matches) > 1:
        raise ApprovalError(f"{wanted} matches {len(matches)} pending requests ({', '.join(matches)}); give more of the id")
    return matches[0] if matches else wanted


def get(ledger: Any, request_id: str) -> dict[str, Any] | None:
    found = ledger.approvals(request_id=request_id)
    return found[0] if found else None


def decide(ledger: Any, request_id: str, allow: bool, by: str, now: float | None = None) -> dict[str, Any]:
    """Answer a pending request as ``by`` (a person or surface: ``cli:alice``, ``chat``);
    returns the decided request. ``ApprovalError`` if it is unknown or already decided."""
    return _settle(ledger, request_id, ALLOWED if allow else DENIED, by, now)


def _settle(ledger: Any, request_id: str, state: str, by: str, now: float | None) -> dict[str, Any]:
    now = time.time() if now is None else now
    if not ledger.decide_approval(request_id, state, by, now):
        row = get(ledger, request_id)
        if row is None:
            raise ApprovalError(f"no approval request {request_id}; `offload approvals` lists the pending ones")
        raise ApprovalError(f"approval request {request_id} was already decided: {row['state']} by "
                            f"{row.get('decided_by') or '?'}")
    row = get(ledger, request_id) or {"request_id": request_id}
    _journal(ledger, row, "approval_decision", request_id=request_id, decision=state, by=by, at=now)
    return row


def wait(ledger: Any, row: dict[str, Any], interrupted: threading.Event, on_wait: Callable[[], Any] | None = None,
         clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """Block until ``row`` is decided (its decided row), decide it ``timed_out`` at its
    deadline, or withdraw it as ``denied`` by ``interrupt`` when ``interrupted`` is set."""
    request_id = row["request_id"]
    while True:
        if on_wait is not None:
            on_wait()
        current = get(ledger, request_id)
        if current is not None and current["state"] != PENDING:
            return current
        outcome = (DENIED, "interrupt") if interrupted.is_set() else (
            (TIMED_OUT, "timeout") if clock() >= row["expires_at"] else None)
        if outcome is not None:
            try:
                return _settle(ledger, request_id, outcome[0], outcome[1], None)
            except ApprovalError:
                continue  # answered in the same instant: read the answer
        interrupted.wait(POLL_S)


def _journal(ledger: Any, row: dict[str, Any], kind: str, **data: Any) -> None:
    if not row.get("delegation_id"):
        return
    try:
        ledger.append_journal([JournalEntry(row["delegation_id"], time.time(), kind, row.get("child"), data)])
    except Exception:  # the approvals table holds it too; a journal write never blocks the child
        logger.debug("journaling %s of %s failed", kind, row.get("request_id"), exc_info=True)


# -- the gate a subagent's run_command asks ---------------------------------------------------
@dataclass(frozen=True)
class ApprovalGate:
    """What one subagent's ``run_command`` asks before it runs a command. ``ledger``: where
    requests go (per use); ``no_ask_reason``: why nobody can answer here (``ask`` then denies);
    ``on_request``: a surface told of each new request (MCP elicitation), called on the child's
    thread."""

    policy: ApprovalPolicy = ApprovalPolicy()
    ledger: Callable[[], Any] | None = None
    session_key: str = ""
    delegation_id: str | None = None
    child: int | None = None
    no_ask_reason: str | None = None
    on_request: Callable[[dict[str, Any]], Any] | None = None

    def for_child(self, delegation_id: str | None, child: int) -> ApprovalGate:
        return replace(self, delegation_id=delegation_id, child=child)

    def check(self, tool: str, command: str, ctx: ToolContext) -> str:
        """'' when ``command`` may run as it is, a note for the result when a person allowed it;
        ``ToolError`` (worded for the child) when it is denied."""
        found = classify(command, ctx.workspace)
        mode, category = self.policy.mode_for(found.categories)
        if mode == ALLOW:
            if category is not None:
                _note_step(ctx, {"categories": list(found.categories), "decision": "allowed", "by": "policy"})
            return ""
        if mode == ASK and self.no_ask_reason is None and self.ledger is not None:
            return self._ask(tool, command, found, ctx)
        why = self.no_ask_reason if mode == ASK else None
        _note_step(ctx, {"categories": list(found.categories), "decision": "denied", "by": "policy"})
        raise ToolError(denial(tool, found, category or "", mode, why))

    def _ask(self, tool: str, command: str, found: Classification, ctx: ToolContext) -> str:
        ledger = self.ledger()
        row = request(ledger, command=command, found=found, session_key=self.session_key,
                      delegation_id=self.delegation_id, child=self.child, timeout_s=self.policy.timeout_s)
        if self.on_request is not None:
            try:
                self.on_request(row)
            except Exception:  # a surface that cannot show it: the request still waits for others
                logger.warning("telling a surface of approval request %s failed", row["request_id"], exc_info=True)
        touch = getattr(ctx.caller, "touch_activity", None)
        decided = wait(ledger, row, ctx.interrupted, on_wait=touch if callable(touch) else None)
        step = {"request_id": row["request_id"], "categories": list(found.categories), "decision": decided["state"],
                "by": decided.get("decided_by")}
        _note_step(ctx, step)
        if decided["state"] == ALLOWED:
            return f"[approved by {decided.get('decided_by')} (request {row['request_id']})]\n"
        raise ToolError(refused(tool, found, decided, self.policy.timeout_s))


def _note_step(ctx: ToolContext, approval: dict[str, Any]) -> None:
    note = getattr(ctx.caller, "note_tool_step", None)
    if callable(note):
        note(approval=approval)


def denial(tool: str, found: Classification, category: str, mode: str, why: str | None) -> str:
    reasons = "; ".join(found.reasons())
    if why:
        return (f"{tool}: this command needs a person's approval ({reasons}), and none can be asked here: {why}. "
                "It was not run. Do the work without it, or say in your final answer what needs to be run.")
    return (f"{tool}: command refused, not run: {reasons} (category {category}). Subagents may not do this "
            f"unattended: the operator's setting delegation.approvals_by_category.{category} or "
            "delegation.approvals is `deny` (`allow` or `ask` changes it). Do the work another way, or say in "
            "your final answer what needs to be run.")


def refused(tool: str, found: Classification, decided: dict[str, Any], timeout_s: float) -> str:
    reasons = "; ".join(found.reasons())
    if decided["state"] == TIMED_OUT:
        what = f"nobody answered within {timeout_s:g} s (delegation.approval_timeout_s), which denies"
    else:
        what = f"{decided.get('decided_by') or 'someone'} denied it"
    return (f"{tool}: command not run: it needed approval ({reasons}; request {decided['request_id']}) and {what}. "
            "Do the work another way, or say in your final answer what needs to be run.")
