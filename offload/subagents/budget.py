"""Token budgets of subagents: per delegation, per session and per day (``delegation.max_tokens_*``).

Owns ``SpendStore`` (the tokens subagents used, per parent session and UTC day, in the guest
table ``subagent_spend`` of ``state.db``), ``DelegationBudget`` (the budget the children of
one delegate_task call share, which charges the store as they go) and the refusal text of
``delegate_task`` for a session or a day over its budget.

Invariants: only usage a server reported is counted (a server that reports none spends
nothing, see docs/delegate-task.md); a child stops before its next model call once its
delegation's budget is used up (the call that crosses it completes), with its partial result
and the notice ``exhausted()`` returns; a failing spend write is logged and never fails a child.
A unit queued in the ledger (for ``offload worker``, or at capacity) carries its budget
(``to_spec``), so the process that runs it -- a worker, or an owner that adopted it after its
own died -- caps and counts it the same (``budget_from_spec``), in that process's home.
"""
from __future__ import annotations

import logging
import sqlite3
import threading
import time
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

logger = logging.getLogger(__name__)

_SCHEMA = ("CREATE TABLE IF NOT EXISTS subagent_spend (day TEXT NOT NULL, session_key TEXT NOT NULL, "
           "tokens INTEGER NOT NULL, PRIMARY KEY (day, session_key))")
_ADD = ("INSERT INTO subagent_spend (day, session_key, tokens) VALUES (?, ?, ?) "
        "ON CONFLICT (day, session_key) DO UPDATE SET tokens = tokens + excluded.tokens")


def reported_tokens(usage: Mapping[str, Any] | None) -> int:
    """Prompt plus completion tokens of one model call's reported usage (0 when none)."""
    total = 0
    for key in ("prompt_tokens", "completion_tokens"):
        value = (usage or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            total += value
    return total


class SpendStore:
    """Tokens used by subagents, per parent session and UTC day, in ``path`` (state.db)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path, self.clock = Path(path), clock
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10)
        conn.execute(_SCHEMA)
        return conn

    def today(self) -> str:
        return datetime.fromtimestamp(self.clock(), tz=timezone.utc).strftime("%Y-%m-%d")

    def add(self, session_key: str, tokens: int) -> None:
        if tokens <= 0:
            return
        try:
            with self._lock, closing(self._connect()) as conn, conn:
                conn.execute(_ADD, (self.today(), session_key, tokens))
        except sqlite3.Error:
            logger.warning("could not record %d subagent tokens in %s", tokens, self.path, exc_info=True)

    def totals(self, session_key: str) -> tuple[int, int]:
        """(tokens this session's subagents used, tokens all subagents used today)."""
        if not self.path.exists():
            return 0, 0
        with self._lock, closing(self._connect()) as conn:
            session = conn.execute("SELECT COALESCE(SUM(tokens), 0) FROM subagent_spend WHERE session_key = ?",
                                   (session_key,)).fetchone()[0]
            day = conn.execute("SELECT COALESCE(SUM(tokens), 0) FROM subagent_spend WHERE day = ?",
                               (self.today(),)).fetchone()[0]
        return int(session), int(day)


class DelegationBudget:
    """The token budget the children of one delegate_task call share (``cap`` None: no cap);
    every charge also goes to the session's and the day's totals. Thread-safe."""

    def __init__(self, cap: int | None, store: SpendStore | None, session_key: str) -> None:
        self.cap, self.store, self.session_key = cap, store, session_key
        self.used = 0
        self._lock = threading.Lock()

    def charge(self, usage: Mapping[str, Any] | None) -> None:
        tokens = reported_tokens(usage)
        with self._lock:
            self.used += tokens
        if self.store is not None:
            self.store.add(self.session_key, tokens)

    def to_spec(self) -> dict[str, Any]:
        """What a queued unit's row carries of this budget, for the process that will run it."""
        return {"max_tokens": self.cap, "session_key": self.session_key, "counted": self.store is not None}

    def exhausted(self) -> str | None:
        """The notice for a child that must stop now, or None while there is budget left."""
        with self._lock:
            used = self.used
        if self.cap is None or used < self.cap:
            return None
        return (f"stopped at its token budget: this delegation's subagents used {used} tokens of "
                f"delegation.max_tokens_per_delegation={self.cap}, so no further model call was made; the output "
                "below is what it had so far. Delegate the unfinished part again, or the operator raises the budget "
                f"(offload config set delegation.max_tokens_per_delegation {self.cap * 2})")


def budget_from_spec(spec: Any, store: SpendStore | None) -> DelegationBudget | None:
    """The budget of a unit rebuilt from its ledger row (``DelegationBudget.to_spec``), counted in
    ``store`` (the running process's) when the dispatching host counted; None: the row has none."""
    if not isinstance(spec, Mapping):
        return None  # queued before budgets travelled, or by a call without any
    cap = spec.get("max_tokens")
    cap = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None
    counted = store if spec.get("counted") else None
    if cap is None and counted is None:
        return None
    return DelegationBudget(cap, counted, str(spec.get("session_key") or ""))


def over_budget(max_per_session: int | None, max_per_day: int | None, store: SpendStore | None,
                session_key: str) -> str | None:
    """Why delegate_task refuses this session now (its budget or the day's is used up), or None."""
    if store is None or (max_per_session is None and max_per_day is None):
        return None
    session, day = store.totals(session_key)
    if max_per_session is not None and session >= max_per_session:
        return (f"not dispatched: this session's subagents have used {session} tokens, its budget "
                f"delegation.max_tokens_per_session={max_per_session}. Do the rest of the work yourself and tell "
                "the user; the operator can raise it (offload config set delegation.max_tokens_per_session N) "
                "or start a new session")
    if max_per_day is not None and day >= max_per_day:
        return (f"not dispatched: subagents have used {day} tokens today (UTC {store.today()}), the daily budget "
                f"delegation.max_tokens_per_day={max_per_day}. Do the rest of the work yourself and tell the user; "
                "the budget renews at 00:00 UTC, and the operator can raise it "
                "(offload config set delegation.max_tokens_per_day N)")
    return None
