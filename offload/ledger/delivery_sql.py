"""The statements the SQLite and PostgreSQL ledgers share, written once and rendered per dialect.

Owns: the row reads (running, queued, pending, settled, by id), taking a queued row and
putting it back, per-child bookkeeping, settling an abandoned row, the delivery-claim lifecycle (claim, complete, release, defer, drop, mark) and
pruning. A backend keeps only what is really its own: connections, leases and fencing, the
schema, the terminal write. Templates are written in SQLite's spelling (``?`` parameters);
``Dialect`` renders them, so a statement cannot drift between the backends.

Invariant: every rendering of a template has the same parameters in the same order, so a
backend passes the same tuple whatever its dialect. No I/O here.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from offload.ledger.codec import dumps, loads

TABLE = "async_delegations"
SETTLED = "delivery_state IN ('delivered','dropped')"
# Rows a consumer may deliver: finished, with an event, not yet delivered or dropped.
_PENDING = "{r}delivery_state='pending' AND {r}state!='running' AND {r}event_json IS NOT NULL"


@dataclass(frozen=True)
class Dialect:
    """How one database spells what the templates need."""

    name: str
    param: str  # the parameter marker
    greatest: str  # the two-argument maximum function
    row: str  # the prefix of the ledger table's columns in row reads ('' or a join alias)

    def render(self, template: str) -> str:
        # Templates hold no literal '?' or '%', so a plain replace is exact.
        return (template.replace("?", self.param).replace("{greatest}", self.greatest)
                .replace("{r}", self.row))


SQLITE = Dialect("sqlite", param="?", greatest="MAX", row="")
POSTGRES = Dialect("postgresql", param="%s", greatest="GREATEST", row="d.")


@dataclass(frozen=True)
class DeliverySql:
    """The shared statements of one dialect; ``DeliverySql.for_dialect(SQLITE)``.

    Fields ending in ``_where`` are the tail of a row read after the backend's own SELECT;
    the comment after each field lists its parameters in order.
    """

    pending_filter: str
    running_where: str  # ()
    queued_where: str  # ()
    take_queued: str  # (owner pid, owner started_at, now, delegation_id)
    requeue: str  # (now, delegation_id)
    pending_where: str  # ()
    settled_where: str  # (limit,)
    by_id_where: str  # (delegation_id,)
    session_where: str  # (session, session, session)
    delete_row: str  # (delegation_id,)
    running_results: str  # (delegation_id,) -- a backend may append its fence
    write_results: str  # (result_json, now, delegation_id)
    complete_row: str  # (state, completed_at, now, event_json, result_json, delegation_id) -- + fence
    settle_abandoned: str  # (now, now, event_json, result_json, delegation_id) -- + fence
    claimed_where: str  # ()
    claim: str  # (claim, now, holder pid, holder started_at, delegation_id, now - lease_s)
    claim_holder: str  # (delegation_id,)
    complete: str  # (now, now, delegation_id, claim)
    release: str  # (max_attempts, max_attempts, reason, max_attempts, now, delegation_id, claim) -> delivery_state
    defer: str  # (now, delegation_id, claim)
    progress: str  # (parts, now, delegation_id, claim)
    drop: str  # (now, reason, delegation_id)
    drop_claimed: str  # (now, reason, delegation_id, claim)
    mark_delivered: str  # (now, now, delegation_id)
    prune_expired: str  # (cutoff,)
    prune_over_cap: str  # (max_settled,)

    @classmethod
    def for_dialect(cls, dialect: Dialect) -> "DeliverySql":
        return cls(**{f.name: dialect.render(_TEMPLATES[f.name]) for f in fields(cls)})


_DROP = f"UPDATE {TABLE} SET delivery_state='dropped', updated_at=?, delivery_claim=NULL, drop_reason=?" \
        " WHERE delegation_id=? AND delivery_state='pending'"
_TEMPLATES: dict[str, str] = {
    "pending_filter": _PENDING,
    "running_where": "WHERE {r}state='running' ORDER BY {r}dispatched_at",
    # The admission queue in the order units are started: first queued, first started.
    "queued_where": "WHERE {r}state='queued' ORDER BY {r}dispatched_at, {r}delegation_id",
    "take_queued": f"UPDATE {TABLE} SET state='running', owner_pid=?, owner_started_at=?, updated_at=?"
                   " WHERE delegation_id=? AND state='queued'",
    # A unit taken from the queue that could not start after all goes back, its place kept.
    "requeue": f"UPDATE {TABLE} SET state='queued', updated_at=? WHERE delegation_id=? AND state='running'"
               " AND event_json IS NULL",
    "pending_where": f"WHERE {_PENDING} ORDER BY {{r}}completed_at, {{r}}delegation_id",
    "settled_where": "WHERE {r}delivery_state IN ('delivered','dropped') ORDER BY {r}updated_at DESC LIMIT ?",
    "by_id_where": "WHERE {r}delegation_id=?",
    # A session's rows not yet delivered or dropped, whatever runs them (queued, running, finished).
    "session_where": "WHERE {r}delivery_state='pending' AND ({r}origin_session=? OR {r}parent_session_id=?"
                     " OR {r}origin_session_id=?) ORDER BY {r}dispatched_at, {r}delegation_id",
    "delete_row": f"DELETE FROM {TABLE} WHERE delegation_id=?",
    "running_results": f"SELECT result_json FROM {TABLE} WHERE delegation_id=? AND state='running'",
    "write_results": f"UPDATE {TABLE} SET result_json=?, updated_at=? WHERE delegation_id=?",
    # The terminal write on the row written at dispatch; delivery bookkeeping restarts.
    "complete_row": f"UPDATE {TABLE} SET state=?, completed_at=?, updated_at=?, event_json=?, result_json=?,"
                    " delivery_state='pending', delivery_claim=NULL, delivery_claimed_at=NULL, delivery_progress=0"
                    " WHERE delegation_id=?",
    "settle_abandoned": f"UPDATE {TABLE} SET state='unknown', completed_at=?, updated_at=?, event_json=?,"
                        " result_json=? WHERE delegation_id=? AND state='running'",
    "claimed_where": "WHERE {r}delivery_state='pending' AND {r}delivery_claim IS NOT NULL ORDER BY {r}delivery_claimed_at",
    "claim": f"UPDATE {TABLE} SET delivery_claim=?, delivery_claimed_at=?, delivery_attempts=delivery_attempts+1,"
             " delivery_claim_pid=?, delivery_claim_started_at=?"
             " WHERE delegation_id=? AND delivery_state='pending' AND (delivery_claim IS NULL OR delivery_claimed_at < ?)",
    "claim_holder": f"SELECT delivery_claim FROM {TABLE} WHERE delegation_id=?",
    "complete": f"UPDATE {TABLE} SET delivery_state='delivered', delivered_at=?, updated_at=?, delivery_claim=NULL"
                " WHERE delegation_id=? AND delivery_state='pending' AND delivery_claim=?",
    # One statement: out of attempts -> dropped with the reason (the claim time kept as a
    # record), else pending and claimable again at once. What was shown stays shown.
    "release": f"UPDATE {TABLE} SET delivery_state=CASE WHEN delivery_attempts>=? THEN 'dropped' ELSE 'pending' END,"
               " drop_reason=CASE WHEN delivery_attempts>=? THEN ? ELSE drop_reason END,"
               " delivery_claim=NULL, delivery_claimed_at=CASE WHEN delivery_attempts>=? THEN delivery_claimed_at END,"
               " updated_at=? WHERE delegation_id=? AND delivery_state='pending' AND delivery_claim=?"
               " RETURNING delivery_state",
    # A deferral is not an attempt: give back the one the claim counted.
    "defer": f"UPDATE {TABLE} SET delivery_claim=NULL, delivery_claimed_at=NULL, updated_at=?,"
             " delivery_attempts={greatest}(0, delivery_attempts-1)"
             " WHERE delegation_id=? AND delivery_state='pending' AND delivery_claim=?",
    "progress": f"UPDATE {TABLE} SET delivery_progress=?, updated_at=?"
                " WHERE delegation_id=? AND delivery_state='pending' AND delivery_claim=?",
    "drop": _DROP,
    "drop_claimed": _DROP + " AND delivery_claim=?",
    "mark_delivered": f"UPDATE {TABLE} SET delivery_state='delivered', delivered_at=?, updated_at=?,"
                      " delivery_claim=NULL, drop_reason=NULL WHERE delegation_id=? AND delivery_state!='delivered'",
    "prune_expired": f"DELETE FROM {TABLE} WHERE {SETTLED} AND updated_at < ?",
    # Keep exactly the newest max_settled by row, not by timestamp: rows settled in one tick
    # share updated_at, and a timestamp cutoff would delete them all.
    "prune_over_cap": f"DELETE FROM {TABLE} WHERE {SETTLED} AND delegation_id NOT IN"
                      f" (SELECT delegation_id FROM {TABLE} WHERE {SETTLED}"
                      " ORDER BY updated_at DESC, delegation_id DESC LIMIT ?)",
}


def with_child(result_json: str | None, entry: dict[str, Any]) -> str:
    """The unit's partial ``result_json`` with ``entry`` recorded, replacing an earlier record
    of the same child (a retried write must not list it twice)."""
    results = [r for r in ((loads(result_json) or {}).get("results") or [])
               if r.get("task_index") != entry.get("task_index")]
    return dumps({"results": [*results, entry], "partial": True})
