"""The PostgreSQL ledger's hot writes in one round trip each: a worker's claim, a finished
child, a queued unit with its NOTIFY, and a completion whose row vanished (a unit's dispatch and
its common completion are server-side functions: ``postgres.functions``).

Each is one simple-query string of a few statements (psycopg's ``ClientCursor`` binds the
parameters on the client), which PostgreSQL runs as ONE implicit transaction:
- every statement takes its own snapshot (READ COMMITTED), so a count after
  ``pg_advisory_xact_lock`` sees every commit of the previous lock holder, as in the explicit
  transaction it replaces;
- a lock taken by one statement (the capacity lock, the lease's fence lock) holds until
  the last has run, and an error in any rolls all of them back;
- no ``BEGIN``/``COMMIT`` of their own and no round trip per statement.

Fencing: a write of a running row names the writer's lease token, and the script's first
statement takes the lease's fence lock shared (``postgres.lease.FENCE_LOCK``; whoever deletes a
lease takes it exclusive first), so the lease check in the next statement (a snapshot taken
after the lock) sees a takeover that committed, and a takeover waits for the script to commit.
Once the lease is gone nothing of the script writes. Statements only; the caller runs them on
a pooled connection.
"""
from __future__ import annotations

from typing import Any, Sequence

from psycopg import ClientCursor
from psycopg.pq import ExecStatus

import offload.ledger.postgres.prepared as prepared
from offload.ledger.postgres.capacity import CAPACITY_LOCK_KEY, LIVE_SLOTS
from offload.ledger.postgres.lease import FENCE_LOCK
from offload.ledger.postgres.sql import _COLUMNS, _WRITE_COLUMNS, FENCE, SQL

Statement = tuple[str, Sequence[Any]]
TUPLES_OK = ExecStatus.TUPLES_OK
LOCK_CAPACITY = "SELECT pg_advisory_xact_lock(hashtext(%s || current_schema()))"
# the capacity lock, then the fence lock (the order every fenced claim takes them in)
LOCK_CAPACITY_AND_FENCE = LOCK_CAPACITY + ", " + FENCE_LOCK[len("SELECT "):]
LEASED = " EXISTS (SELECT 1 FROM async_delegation_owners WHERE token=%s)"
LEASE_HELD = "SELECT" + LEASED
ROOM = f" ({LIVE_SLOTS}) < %s"


def _type(declaration: str) -> str:
    return next(t for t in ("double precision", "bigint", "text") if declaration.startswith(t))


_TYPES = {name: _type(declaration) for name, declaration in _COLUMNS}
# INSERT … SELECT, so a WHERE can gate it: each value cast to its column's type (an untyped
# parameter in a select list would be text).
_INSERT_SELECT = (f"INSERT INTO async_delegations ({', '.join(_WRITE_COLUMNS)}) SELECT "
                  + ", ".join(f"%s::{_TYPES[c]}" for c in _WRITE_COLUMNS))
INSERT_COMPLETION = _INSERT_SELECT + " WHERE" + LEASED + " ON CONFLICT (delegation_id) DO NOTHING"
NOTIFY_ANY = "SELECT pg_notify(%s, %s)"
NOTIFY = NOTIFY_ANY + " WHERE" + LEASED
# A finished child: the unit's partial results written whole (the writer keeps them), fenced by
# the row's token and the lease (after its fence lock; token None: no lease, no lock).
RECORD_CHILD = SQL.write_results + " AND state='running'" + FENCE
RECORD_LEASED_CHILD = RECORD_CHILD + " AND" + LEASED


def run(conn: Any, statements: Sequence[Statement]) -> list[tuple[int, list[tuple[Any, ...]] | None]]:
    """Run ``statements`` as one string, one implicit transaction, one round trip, each as a
    prepared statement of this connection (``postgres.prepared``); each statement's
    (rowcount, rows or None)."""
    cur = ClientCursor(conn)
    sqls, params = [sql for sql, _ in statements], [p for _, values in statements for p in values]
    try:
        skip = _send(cur, sqls, params)
    except prepared.MISMATCH:
        prepared.mismatched()  # the script failed whole, nothing of it kept: once more as text
        skip = _send(cur, sqls, params)
    for _ in range(skip):  # the PREPAREs' own results
        cur.nextset()
    results = []
    while True:
        # the result's status, not ``cur.description`` (which builds a Column per column)
        rows = cur.fetchall() if cur.pgresult.status == TUPLES_OK else None
        results.append((cur.rowcount, rows))
        if not cur.nextset():
            return results


def _send(cur: Any, sqls: list[str], params: list[Any]) -> int:
    """Execute the script (prepared where it can be); how many leading results are PREPAREs'."""
    text, new, skip = prepared.script(cur.connection, sqls)
    try:
        cur.execute(text, params)
    except BaseException:
        prepared.ran(cur.connection, new, ok=False)
        raise
    prepared.ran(cur.connection, new, ok=True)
    return skip


def complete_whole(conn: Any, token: int, whole: Sequence[Any], channel: str, delegation_id: str) -> bool:
    """A completion whose row no longer runs under ``token``: the whole row (``completion_values``)
    inserted if it vanished, and the NOTIFY, only while the lease exists; whether it does. (The
    common case, the row still running, is ``postgres.functions.complete``.)"""
    _, (_, held), *_ = run(conn, [(FENCE_LOCK, (token,)), (LEASE_HELD, (token,)),
                                  (INSERT_COMPLETION, (*whole, token)), (NOTIFY, (channel, delegation_id, token))])
    return bool(held[0][0])


def record_child(conn: Any, result_json: str, now: float, delegation_id: str, token: int | None) -> bool:
    """Write a running unit's partial results; False if it is not running under ``token``'s
    live lease."""
    if token is None:
        return conn.execute(RECORD_CHILD, (result_json, now, delegation_id, token)).rowcount > 0
    _, (written, _) = run(conn, [(FENCE_LOCK, (token,)),
                                 (RECORD_LEASED_CHILD, (result_json, now, delegation_id, token, token))])
    return written > 0
