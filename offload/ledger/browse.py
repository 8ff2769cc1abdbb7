"""Reading the whole ledger a page at a time, for the dashboard's history: the filters, the
keyset, the indexes that keep both fast at 100,000 rows, and the finished rows' timings the
charts are drawn from. Statements are written once and rendered per dialect (``delivery_sql``).

A page is the rows dispatched before the last one shown (``(dispatched_at, delegation_id)``,
newest first), so page N costs what page 1 does: an index range, never an OFFSET. Goal search
and the model filter match the task's stored JSON (case-insensitive, ``%`` and ``_`` taken
literally). The two indexes are part of the ledger's schema (migration 4 in
``offload.ledger.migrations``), so a browse never writes.
Invariant: nothing here writes a row.
"""
from __future__ import annotations

import json
from typing import Any

from offload.ledger.delivery_sql import Dialect
from offload.ledger.protocol import LedgerRow, local_host
from offload.ledger.reads import PAGE_ROWS, Browse  # the page query, named here too

INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_async_delegations_browse ON async_delegations(dispatched_at, delegation_id)",
    # Only the queued rows (few): the roster's and the admission queue's read, not a scan of every row.
    "CREATE INDEX IF NOT EXISTS idx_async_delegations_queued ON async_delegations(dispatched_at, delegation_id)"
    " WHERE state = 'queued'",
    # Covering: the charts read only these columns of the rows finished in their window (and the
    # roster finds the units finished in its last minutes by its leading column).
    "CREATE INDEX IF NOT EXISTS idx_async_delegations_finished"
    " ON async_delegations(completed_at, dispatched_at, delivered_at, state)",
)
FINISHED_SINCE = ("SELECT dispatched_at, completed_at, delivered_at, state FROM async_delegations"
                  " WHERE completed_at >= ? ORDER BY completed_at")


def _like(text: str) -> str:
    """``text`` as a LIKE pattern matching it anywhere, its own ``%``, ``_`` and ``\\`` literal."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _owner_clause(owner: str, r: str, owner_host: bool) -> tuple[str, list[Any]]:
    """Rows whose owner is the process ``owner`` names (its pid) or runs on the host it names:
    the host stamped on the row on a shared ledger; on a ledger only one host uses (no host
    column) every owner runs on this host, so this host's name keeps every owned row."""
    if owner_host:
        return f"(CAST({r}owner_pid AS TEXT) = ? OR {r}owner_host = ?)", [owner, owner]
    if owner == local_host():
        return f"{r}owner_pid IS NOT NULL", []
    return f"CAST({r}owner_pid AS TEXT) = ?", [owner]


def browse_where(query: Browse, dialect: Dialect, owner_host: bool) -> tuple[str, tuple[Any, ...]]:
    """The tail of a row read (after the backend's SELECT) and its parameters."""
    r, like = dialect.row, "ILIKE" if dialect.name == "postgresql" else "LIKE"
    before = query.before or (0.0, "")
    wanted: list[tuple[Any, str, list[Any]]] = [  # (in use, clause, its parameters)
        (query.states, f"{r}state IN ({', '.join('?' * len(query.states))})", list(query.states)),
        (query.delivery_state, f"{r}delivery_state = ? AND {r}state NOT IN ('queued', 'running')",
         [query.delivery_state]),
        (query.session, f"(? IN ({r}origin_session, {r}parent_session_id, {r}origin_ui_session_id,"
                        f" {r}origin_session_id))", [query.session]),
        (query.owner, *_owner_clause(query.owner, r, owner_host)),
        (query.model, f"{r}task_json {like} ? ESCAPE '\\'",
         [_like(f'"model":{json.dumps(query.model, ensure_ascii=False)}')]),
        (query.text, f"{r}task_json {like} ? ESCAPE '\\'", [_like(query.text)]),
        (query.since is not None, f"{r}dispatched_at >= ?", [query.since]),
        (query.finished_since is not None, f"{r}completed_at >= ?", [query.finished_since]),
        (query.before is not None, f"({r}dispatched_at < ? OR ({r}dispatched_at = ? AND {r}delegation_id < ?))",
         [before[0], before[0], before[1]]),
    ]
    used = [(clause, values) for in_use, clause, values in wanted if in_use]
    where = f"WHERE {' AND '.join(clause for clause, _ in used)} " if used else ""
    # With finished_since the rows are the few in a completed_at range (idx_..._finished); the unary
    # plus keeps SQLite, which has no statistics, from walking the dispatched_at index over every row.
    order = "+" if query.finished_since is not None else ""
    tail = f"{where}ORDER BY {order}{r}dispatched_at DESC, {r}delegation_id DESC LIMIT ?"
    return dialect.render(tail), (*(v for _, values in used for v in values), int(query.limit))


class BrowseReads:
    """Mixed into the SQL ledgers: ``browse`` and ``finished_since`` written once.
    A backend names its ``_dialect`` and whether its rows carry the owner's host
    (``_owner_hosts``), and gives ``_select(tail, params)`` (rows), ``_read(sql, params)``
    (tuples; [] without a store)."""

    _dialect: Dialect
    _owner_hosts = False

    def browse(self, query: Browse) -> list[LedgerRow]:
        return self._select(*browse_where(query, self._dialect, self._owner_hosts))

    def finished_since(self, since: float) -> list[tuple[float, float, float | None, str]]:
        return [tuple(r) for r in self._read(self._dialect.render(FINISHED_SINCE), (since,))]


def keeps(query: Browse, row: dict[str, Any]) -> bool:
    """The same filter over a stored row dict (the memory ledger)."""
    task_json = (row.get("task_json") or "").lower()
    checks = (
        not query.states or row["state"] in query.states,
        not query.delivery_state or (row["delivery_state"] == query.delivery_state
                                     and row["state"] not in ("queued", "running")),
        not query.session or query.session in (row["origin_session"], row["parent_session_id"],
                                               row["origin_ui_session_id"], row["origin_session_id"]),
        not query.owner or query.owner == str(row.get("owner_pid"))
        or (query.owner == local_host() and row.get("owner_pid") is not None),
        not query.model or f'"model":{json.dumps(query.model, ensure_ascii=False)}'.lower() in task_json,
        not query.text or query.text.lower() in task_json,
        query.since is None or row["dispatched_at"] >= query.since,
        query.finished_since is None or (row["completed_at"] or float("-inf")) >= query.finished_since,
        query.before is None or (row["dispatched_at"], row["delegation_id"]) < query.before,
    )
    return all(checks)
