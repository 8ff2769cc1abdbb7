"""``delegation.max_concurrent_children`` across hosts on a shared PostgreSQL ledger: one
budget for units run where they were dispatched (``run_on: local``) and units ``offload
worker`` processes claim from the work queue (``postgres.queue``).

Invariant: a unit takes a new slot only in a transaction that holds one transaction-scoped
advisory lock (``CAPACITY_LOCK_KEY``) while it counts the live slots and inserts (a local
dispatch) or claims (a worker, an owner taking back its queued unit): ``postgres.script.dispatch``
and ``postgres.queue.claim``, each one implicit transaction whose count is taken after the
lock, or ``admitting``, an explicit one; so two hosts never both take the last slot. A slot is live while one of its rows is ``running`` under an owner lease
that has not expired (a dead owner stops counting once its lease runs out). The units of one local call share their call's
slot (``slot_key`` in task_json); every other row, a worker's claimed unit included, is its
own slot. A unit is admitted once: a worker's claim is its admission, so starting the claimed
unit does not ask again. Statements only, no I/O.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from offload.ledger.postgres.sql import DB_NOW, SCHEMA_LOCK_KEY

# The key's text is what every process of the fleet locks, old and new: keep it.
CAPACITY_LOCK_KEY = "offload worker claims"
LIVE_SLOTS = ("SELECT count(DISTINCT coalesce(d.task_json::jsonb->>'slot_key', d.delegation_id))"
              " FROM async_delegations d JOIN async_delegation_owners o ON o.token = d.owner_token"
              f" WHERE d.state = 'running' AND o.expires_at > {DB_NOW}")
assert SCHEMA_LOCK_KEY != CAPACITY_LOCK_KEY


@contextmanager
def admitting(conn: Any, max_running: int) -> Iterator[bool]:
    """A transaction holding the capacity lock; yields whether a slot is free on all hosts
    together. What the caller writes inside it takes that slot before anyone else may count."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s || current_schema()))", (CAPACITY_LOCK_KEY,))
        yield conn.execute(LIVE_SLOTS).fetchone()[0] < max_running
