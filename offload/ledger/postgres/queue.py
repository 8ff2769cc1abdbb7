"""The work queue of ``delegation.run_on: workers`` on the PostgreSQL ledger.

A parent that dispatches to workers only inserts a ``queued`` row (its task JSON is the unit
spec a worker needs: goals, context, role, model, task indexes, routing) and notifies. An
``offload worker`` claims queued rows one at a time:

- a claim takes a capacity slot (``postgres.capacity``: counted on ALL hosts under one
  advisory lock, the same budget local dispatch draws from), so ``max_concurrent_children``
  holds across all hosts, not per process; the row itself is taken ``FOR UPDATE SKIP LOCKED``;
  a worker's lock, lease check and claim are one round trip (``postgres.script``);
- the claim moves the row to ``running`` under the worker's lease token in the same statement,
  so from then on it is recovered like any other running row if the worker dies (after its
  lease, finished children keep their real results).

The same rows hold the admission queue of ``delegation.at_capacity: queue``: a unit queued by
an owner at capacity carries that owner's lease token; the owner takes it back by id
(``claim_one``) when a slot frees, and a worker or any other owner takes it once that lease
is gone.

Functions here take a connection; ``PostgresLedger`` runs them on its pool (no I/O of its own).
"""
from __future__ import annotations

from typing import Any

from offload.ledger.protocol import DispatchRow, LedgerRow
from offload.ledger.postgres.capacity import CAPACITY_LOCK_KEY, admitting
from offload.ledger.postgres.script import LEASED, LOCK_CAPACITY_AND_FENCE, ROOM, run
from offload.ledger.postgres.sql import DB_NOW, INSERT_DISPATCH, decode, dispatch_values
from offload.ledger.postgres.sql import _INSERT, _ROW_COLUMNS, _WRITE_COLUMNS  # the same columns as a dispatch

_ENQUEUE = _INSERT + " ON CONFLICT (delegation_id) DO NOTHING"
# The claimed row comes back whole (as ``SELECT`` reads it; its lease is this worker's, just
# verified, and nobody holds a delivery claim on a row that just started): no second round trip.
_TAKE = ("UPDATE async_delegations SET state='running', owner_host=%s, owner_pid=%s, owner_started_at=%s,"
         " owner_token=%s, updated_at=%s WHERE delegation_id = ")
_RETURNING = f" RETURNING {', '.join(_ROW_COLUMNS)}, true, false"
# A worker takes the oldest row nobody alive waits to start: one queued for the workers (no
# owner), or one an owner queued at capacity (``delegation.at_capacity: queue``) whose lease is
# gone -- that owner died, and any live owner of the ledger may start it.
# After the capacity lock and the lease's fence lock, one statement: whether this worker's lease
# is live and a slot is free on all hosts (both read now, after the locks), and that row moved
# to running under the lease if both hold.
_CLAIM = (f"WITH gate AS (SELECT{LEASED} AS held,{ROOM} AS room), taken AS ("
          + _TAKE + "(SELECT q.delegation_id FROM async_delegations q WHERE q.state='queued' AND (q.owner_token IS NULL"
          " OR NOT EXISTS (SELECT 1 FROM async_delegation_owners o WHERE o.token = q.owner_token"
          f" AND o.expires_at > {DB_NOW})) ORDER BY q.dispatched_at, q.delegation_id LIMIT 1 FOR UPDATE SKIP LOCKED)"
          " AND (SELECT held AND room FROM gate)" + _RETURNING + ")"
          " SELECT gate.held, gate.room, taken.* FROM gate LEFT JOIN taken ON true")
_CLAIM_ONE = _TAKE + "%s AND state='queued'" + _RETURNING
_REQUEUE = ("UPDATE async_delegations SET state='queued', updated_at=%s WHERE delegation_id=%s AND state='running'"
            " AND event_json IS NULL")

# Starting a claimed unit writes its dispatch row over the claimed one only while that is still
# running under the claim's token: fenced by the row itself, so no lease check before it.
_START_CLAIMED = INSERT_DISPATCH + " WHERE async_delegations.owner_token = excluded.owner_token" \
                                   " AND async_delegations.state = 'running'"


def queued_values(row: DispatchRow, now: float, host_id: str, token: int | None) -> tuple[Any, ...]:
    """The ``_INSERT`` values of ``row`` as ``queued``, under the lease ``token`` of the owner that
    queued it at capacity, or none (a unit for the workers: ``row`` has no owner)."""
    values = dict(zip(_WRITE_COLUMNS, dispatch_values(row, now, host_id, token)))
    values["state"] = "queued"
    return tuple(values.values())


def enqueue(conn: Any, row: DispatchRow, now: float, host_id: str, token: int | None = None) -> bool:
    """Insert ``row`` as ``queued``; False if that id already exists."""
    return conn.execute(_ENQUEUE, queued_values(row, now, host_id, token)).rowcount > 0


def claim_one(conn: Any, delegation_id: str, now: float, host_id: str, owner: tuple[int, int | None], token: int,
              max_running: int):
    """Take the queued row ``delegation_id`` for this owner if fewer than ``max_running`` slots
    run on all hosts; the row (now ``running`` under ``token``), or None."""
    with admitting(conn, max_running) as free:
        if not free:
            return None
        taken = conn.execute(_CLAIM_ONE, (host_id, owner[0], owner[1], token, now, delegation_id)).fetchone()
        return None if taken is None else decode(taken)


def requeue(conn: Any, values: tuple[Any, ...], now: float, delegation_id: str) -> None:
    """Put a taken row back (``queued_values``), or write it whole if it vanished."""
    if not conn.execute(_REQUEUE, (now, delegation_id)).rowcount:
        conn.execute(_ENQUEUE, values)


def claim(conn: Any, now: float, host_id: str, owner: tuple[int, int | None], token: int, max_running: int
          ) -> tuple[bool, tuple[LedgerRow | None, bool]]:
    """Take the oldest queued row for this worker if ``token``'s lease is live and fewer than
    ``max_running`` slots run on all hosts, in one round trip: (whether the lease is held,
    (the claimed row now ``running`` under ``token`` or None, whether a slot was free))."""
    _, (_, found) = run(conn, [(LOCK_CAPACITY_AND_FENCE, (CAPACITY_LOCK_KEY, token)),
                               (_CLAIM, (token, max_running, host_id, owner[0], owner[1], token, now))])
    held, room, *taken = found[0]
    return bool(held), (decode(tuple(taken)) if taken[0] is not None else None, bool(room))


def start_claimed(conn: Any, values: tuple[Any, ...]) -> None:
    """Write the dispatch row (``INSERT_DISPATCH`` values, under the claim's token) of a unit
    this worker claimed; nothing if the claim was recovered meanwhile (its lease revoked)."""
    conn.execute(_START_CLAIMED, values)
