"""Approval requests on the dashboard (issue 29 item 2): the subagents' risky commands waiting
for a person's answer, listed on the overview (all of them) and on a delegation's page (its
own), with Approve / Deny buttons decided through ``offload.subagents.approvals``, the same
call ``offload approvals`` makes.

The list is a live part of its own, sent on the page's one stream (``/events``,
``/d/ID/events``) apart from the roster: it changes only when a request arrives or is
answered, so its buttons are never swapped under the pointer while the roster's ages tick. A decision is a POST (the guard's same-origin and token checks
apply as to every action); ``back`` is where the browser returns, a path of this dashboard.
Invariants: nothing here decides anything but the one request named; a request another
person answered first is reported as such, never decided twice.
"""
from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from offload.ledger.queries import existing_ledger
from offload.subagents import approvals

if TYPE_CHECKING:
    from offload.runtime import Offload

DECISIONS = {"allow": True, "deny": False}


def waiting(off: Offload, delegation_id: str | None = None) -> list[dict[str, Any]]:
    """The pending requests, oldest first; of one delegation when given."""
    found = existing_ledger(off.ledger())
    rows = approvals.pending(found) if found else []
    return [r for r in rows if delegation_id is None or r.get("delegation_id") == delegation_id]


def decide(off: Offload, request_id: str, decision: str) -> tuple[bool, str]:
    """Answer ``request_id`` (``allow`` or ``deny``) as the dashboard; ``(ok, message)``."""
    if decision not in DECISIONS:
        return False, f"{decision!r} is not an answer: use allow or deny"
    by = f"dashboard@{socket.gethostname()}"
    try:
        row = approvals.decide(off.ledger(), request_id, DECISIONS[decision], by)
    except approvals.ApprovalError as exc:
        return False, str(exc)
    verb = "allowed" if DECISIONS[decision] else "denied"
    return True, f"{verb} {row.get('command') or request_id} ({request_id}); the subagent goes on"


def back_path(text: str, default: str = "/") -> str:
    """Where to return after a decision: a path of this dashboard only (never another site)."""
    return text if text.startswith("/") and not text.startswith("//") and "\\" not in text else default
