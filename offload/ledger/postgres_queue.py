"""The work queue of ``delegation.run_on: workers`` on the PostgreSQL ledger.

A parent that dispatches to workers only inserts a ``queued`` row (its task JSON is the unit
spec a worker needs: goals, context, role, model, task indexes, routing) and notifies. An
``offload worker`` claims queued rows one at a time:

- a claim takes a capacity slot (``postgres_capacity.admitting``: counted on ALL hosts under
  one advisory lock, the same budget local dispatch draws from), so ``max_concurrent_children``
  holds across all hosts, not per process; the row itself is taken ``FOR UPDATE SKIP LOCKED``;
- the claim moves the row to ``running`` under the worker's lease token in the same statement,
  so from then on it is recovered like any other running row if the worker dies (after its
  lease, finished children keep their real results).

Functions here take a connection; ``PostgresLedger`` runs them on its pool (no I/O of its own).
"""
from __future__ import annotations

from typing import Any

from offload.ledger.protocol import DispatchRow
from offload.ledger.postgres_capacity import admitting
from offload.ledger.postgres_sql import INSERT_DISPATCH, decode, dispatch_values
from offload.ledger.postgres_sql import _INSERT, _ROW_COLUMNS, _WRITE_COLUMNS  # the same columns as a dispatch

_ENQUEUE = _INSERT + " ON CONFLICT (delegation_id) DO NOTHING"
# The claimed row comes back whole (as ``SELECT`` reads it; its lease is this worker's, just
# verified, and nobody holds a delivery claim on a row that just started): no second round trip.
_CLAIM = ("UPDATE async_delegations SET state='running', owner_host=%s, owner_pid=%s, owner_started_at=%s,"
          " owner_token=%s, updated_at=%s WHERE delegation_id = (SELECT delegation_id FROM async_delegations"
          " WHERE state='queued' ORDER BY dispatched_at, delegation_id LIMIT 1 FOR UPDATE SKIP LOCKED)"
          f" RETURNING {', '.join(_ROW_COLUMNS)}, true, false")

# Starting a claimed unit writes its dispatch row over the claimed one only while that is still
# running under the claim's token: fenced by the row itself, so no lease check before it.
_START_CLAIMED = INSERT_DISPATCH + " WHERE async_delegations.owner_token = excluded.owner_token" \
                                   " AND async_delegations.state = 'running'"


def enqueue(conn: Any, row: DispatchRow, now: float, host_id: str) -> bool:
    """Insert ``row`` as ``queued`` (no owner yet); False if that id already exists."""
    values = dict(zip(_WRITE_COLUMNS, dispatch_values(row, now, host_id, None)))
    values.update(state="queued", owner_pid=None, owner_started_at=None)  # nobody runs it yet
    return conn.execute(_ENQUEUE, tuple(values.values())).rowcount > 0


def claim(conn: Any, now: float, host_id: str, owner: tuple[int, int | None], token: int, max_running: int):
    """Take the oldest queued row for this worker if fewer than ``max_running`` slots run on all
    hosts; the claimed row (now ``running`` under ``token``), or None."""
    with admitting(conn, max_running) as free:
        if not free:
            return None
        taken = conn.execute(_CLAIM, (host_id, owner[0], owner[1], token, now)).fetchone()
        return None if taken is None else decode(taken)


def start_claimed(conn: Any, values: tuple[Any, ...]) -> None:
    """Write the dispatch row (``INSERT_DISPATCH`` values, under the claim's token) of a unit
    this worker claimed; nothing if the claim was recovered meanwhile (its lease revoked)."""
    conn.execute(_START_CLAIMED, values)
