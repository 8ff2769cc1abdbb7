"""``max_concurrent_children`` across hosts for units run where they were dispatched
(``delegation.run_on: local``) on a shared PostgreSQL ledger.

A dispatch that opens a new capacity slot (a call's first unit; the other units of one call
share its slot) is inserted only if fewer than ``max_running`` slots run on all hosts
together. The count and the insert happen in one transaction under the same advisory lock
worker claims take (``postgres_queue``), so two hosts never both take the last slot, and
local dispatch and ``offload worker`` claims draw from one budget. A slot is live while one
of its rows is ``running`` under an owner lease that has not expired (a dead owner stops
counting once its lease runs out). No I/O of its own: functions take a connection.
"""
from __future__ import annotations

from typing import Any

from delegation.ledger.postgres_queue import CLAIM_LOCK_KEY
from delegation.ledger.postgres_sql import DB_NOW, INSERT_DISPATCH

# A unit of a multi-unit call carries its call's slot in task_json (``slot_key``); a lone unit is its own slot.
_LIVE_SLOTS = ("SELECT count(DISTINCT coalesce(d.task_json::jsonb->>'slot_key', d.delegation_id))"
               " FROM async_delegations d JOIN async_delegation_owners o ON o.token = d.owner_token"
               f" WHERE d.state = 'running' AND o.expires_at > {DB_NOW}")


def dispatch_within(conn: Any, values: tuple[Any, ...], max_running: int) -> bool:
    """Insert the ``running`` row (``INSERT_DISPATCH`` values) if a slot is free on all hosts
    together; False, inserting nothing, if not."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s || current_schema()))", (CLAIM_LOCK_KEY,))
        if conn.execute(_LIVE_SLOTS).fetchone()[0] >= max_running:
            return False
        conn.execute(INSERT_DISPATCH, values)
        return True
