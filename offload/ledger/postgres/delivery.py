"""The PostgreSQL ledger's delivery claims (a mixin of ``PostgresLedger``): a consumer claims a
settled row before it shows the result, completes, releases, defers or drops the claim, and
records the parts of a split result already shown; the statements are the ones SQLite runs
(``delivery_sql``), plus the holder's host and lease token.

A claim records its holder's host and lease, so a claim whose holder died elsewhere lapses with
that lease (``claim_abandoned``). Every write goes through the ledger's outbox (``_write``): kept
in order while the server is unreachable and replayed once it is back, a replayed completion
also completing a row whose claim never reached the server. Uses the ledger's pool (``_run``),
reads (``_select``, ``_catch_up``), lease and host id.
"""
from __future__ import annotations

from typing import Any, Callable

from offload.ledger.postgres.outbox import no_payload
from offload.ledger.postgres.sql import CLAIM, COMPLETE_REPLAYED
from offload.ledger.postgres.sql import SQL as _SQL
from offload.ledger.protocol import LedgerRow, OwnerCheck


class PostgresDeliveryClaims:
    def claimed_rows(self) -> list[LedgerRow]:
        return self._select(_SQL.claimed_where, ())

    def claim_abandoned(self, row: LedgerRow, alive: OwnerCheck) -> bool:
        """Whether the claim holder is known dead: its process on this host, its lease elsewhere."""
        extra = row.extra or {}
        if row.delivery_claim is None or row.delivery_claim_pid is None:
            return False
        if extra.get("claim_host") == self.host_id:
            return not alive(row.delivery_claim_pid, row.delivery_claim_started_at)
        return extra.get("claim_token") is not None and not extra.get("claim_lease_live")

    def claim_delivery(self, delegation_id: str, claim: str, now: float, lease_s: float,
                       holder: tuple[int, int | None] | None = None) -> bool | None:
        self._catch_up()  # a claim is granted only on a row this process's kept writes are in
        pid, started = holder or (None, None)

        def claim_row(conn: Any) -> bool | None:
            # The lease makes this process's death visible to other hosts (its claim then lapses
            # with the lease, not the claim lease); a consumer takes one at its first claim.
            token = self.lease.token(conn)
            if conn.execute(CLAIM, (claim, now, pid, started, self.host_id, token, delegation_id,
                                    now - lease_s)).rowcount:
                return True
            found = conn.execute(_SQL.claim_holder, (delegation_id,)).fetchone()
            if found is None:
                return None
            return found[0] == claim  # our own claim: the first try committed but its answer was lost
        return self._run(claim_row, missing=None)

    def complete_delivery(self, delegation_id: str, claim: str, now: float) -> bool:
        # Replayed, the claim itself may never have reached the server (it was granted in memory
        # while the server was down), so a row nobody else has claimed is completed too.
        return self._write("completing a delivery", delegation_id,
                           _updating(_SQL.complete, (now, now, delegation_id, claim)),
                           _updating(COMPLETE_REPLAYED, (now, now, delegation_id, claim)), no_payload, missing=False)

    def release_delivery(self, delegation_id: str, claim: str, now: float, max_attempts: int,
                         reason: str | None = None) -> str:
        def release(conn: Any) -> Any:
            return conn.execute(_SQL.release, (max_attempts, max_attempts, reason, max_attempts, now, delegation_id,
                                               claim)).fetchone()
        state = self._write("releasing a delivery", delegation_id, release, release, no_payload, missing=None)
        return state[0] if state else ""

    def defer_delivery(self, delegation_id: str, claim: str, now: float) -> bool:
        return self._update(_SQL.defer, (now, delegation_id, claim), "deferring a delivery", delegation_id)

    def record_progress(self, delegation_id: str, claim: str, parts: int, now: float) -> bool:
        return self._update(_SQL.progress, (parts, now, delegation_id, claim), "recording a delivery's progress",
                            delegation_id)

    def drop_delivery(self, delegation_id: str, claim: str | None, now: float, reason: str | None = None) -> bool:
        if claim is None:
            return self._update(_SQL.drop, (now, reason, delegation_id), "dropping a delivery", delegation_id)
        return self._update(_SQL.drop_claimed, (now, reason, delegation_id, claim), "dropping a delivery",
                            delegation_id)

    def mark_delivered(self, delegation_id: str, now: float) -> bool:
        return self._update(_SQL.mark_delivered, (now, now, delegation_id), "acknowledging a delivery",
                            delegation_id)

    def _update(self, statement: str, params: tuple[Any, ...], what: str, delegation_id: str) -> bool:
        update = _updating(statement, params)
        return self._write(what, delegation_id, update, update, no_payload, missing=False)


def _updating(statement: str, params: tuple[Any, ...]) -> Callable[[Any], bool]:
    return lambda conn: conn.execute(statement, params).rowcount > 0
