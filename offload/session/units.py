"""A session's background units that other processes run or ran -- an ``offload worker``
(``delegation.run_on: workers``), another host, another process of the same session -- as the
session's driver lists and awaits them.

The engine's in-memory records cover only units this process runs. A unit queued for the
workers is a ledger row from the start, so ``offload run`` and the chat also read the ledger:
every row of the session (and of the sessions it was compressed out of) that is not yet
delivered or dropped is outstanding, whoever runs it, until a consumer of the session has
delivered it. Rows this process owns are left to the in-memory records (they know more, and a
failed ledger write must not keep a finished unit "running" here).

Invariant: reading never writes and never raises: a ledger that cannot be read lists nothing
(logged once), so a broken ledger cannot make a session wait forever or crash its driver.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

from offload.engine.delivery import is_this_process
from offload.ledger import DelegationLedger, LedgerError, LedgerRow

logger = logging.getLogger(__name__)

WAITING_STATES = frozenset({"queued", "running"})  # a ledger row whose result is still to come


def owner_label(row: LedgerRow) -> str:
    """Who has the unit, for a user waiting on it."""
    if row.state == "queued" and not row.owner_pid:
        return "queued for an `offload worker` (none has claimed it yet)"
    if row.state == "queued":
        return f"queued: starts when a background slot of process {row.owner_pid} frees (or any live owner's, if it died)"
    host = (row.extra or {}).get("owner_host")
    return f"{row.state} in process {row.owner_pid or '?'}" + (f" on {host}" if host else "")


def item(row: LedgerRow, live: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ledger row in the shape of an engine record (``list_async_delegations``), for the roster."""
    task = row.task or {}
    goals = task.get("goals") or [task.get("goal") or ""]
    finished = {e["task_index"]: e for e in (row.result or {}).get("results") or []
                if isinstance(e, dict) and isinstance(e.get("task_index"), int)}
    out = {"delegation_id": row.delegation_id, "status": row.state, "goal": goals[0] if goals else "",
           "goals": goals, "group": task.get("group"), "task_indexes": task.get("task_indexes"),
           "dispatched_at": row.dispatched_at, "children_finished": finished, "where": owner_label(row)}
    if live:
        out.update(seconds_since_progress=live.get("seconds_since_progress"),
                   children_activity=live.get("children_activity") or [])
    return out


class SessionRows:
    """The ledger rows of one session's lineage that this process does not own, re-read at
    most every ``max_age_s`` (a driver asks several times per poll)."""

    def __init__(self, ledger: Callable[[], DelegationLedger], max_age_s: float = 0.2) -> None:
        self.ledger, self.max_age_s = ledger, max_age_s
        self._cached: tuple[float, tuple[str, ...], list[LedgerRow]] = (0.0, (), [])
        self._warned = False

    def rows(self, sessions: Iterable[str]) -> list[LedgerRow]:
        wanted = tuple(sessions)
        read_at, cached_for, rows = self._cached
        if cached_for == wanted and time.monotonic() - read_at < self.max_age_s:
            return rows
        rows = self._read(wanted)
        self._cached = (time.monotonic(), wanted, rows)
        return rows

    def forget(self) -> None:
        """The next ``rows`` reads the ledger again."""
        self._cached = (0.0, (), [])

    def _read(self, sessions: tuple[str, ...]) -> list[LedgerRow]:
        try:
            ledger = self.ledger()
            if not ledger.exists():
                return []
            found: dict[str, LedgerRow] = {}
            for session in sessions:
                for row in ledger.undelivered_rows(session):
                    if not ledger.owned_here(row, is_this_process):
                        found.setdefault(row.delegation_id, row)
            return list(found.values())
        except (LedgerError, OSError) as exc:
            if not self._warned:
                self._warned = True
                logger.warning("cannot read this session's units from the ledger (%s); waiting only for the "
                               "units this process runs", exc)
            return []
