"""Replay forms of PostgreSQL ledger writes that differ from the first attempt (the writes
``postgres.outbox`` replays once an unreachable server is back). No I/O of its own.

A replay must be harmless if the first attempt did commit (its acknowledgement was lost with
the connection) and must never undo what another host did meanwhile: a replayed dispatch
inserts only a missing row and adopts the lease token of a row that exists, so a later fenced
write by this process is refused if that row was recovered under its revoked lease.
"""
from __future__ import annotations

from typing import Any

from offload.ledger.postgres.sql import INSERT_COMPLETION


def dispatch_once(conn: Any, values: tuple[Any, ...], delegation_id: str) -> int | None:
    """Insert the ``running`` row unless it exists; the lease token the row carries."""
    with conn.transaction():
        conn.execute(INSERT_COMPLETION, values)  # the same columns, ON CONFLICT DO NOTHING
        found = conn.execute("SELECT owner_token FROM async_delegations WHERE delegation_id=%s",
                             (delegation_id,)).fetchone()
    return found[0] if found else None
