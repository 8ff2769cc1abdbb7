"""The PostgreSQL ledger's queue operations (a mixin of ``PostgresLedger``): the work queue of
``delegation.run_on: workers`` and the admission queue of ``delegation.at_capacity: queue``,
over the statements of ``postgres.queue``.

A queued row is claimed in one conditional write under the capacity lock, under this process's
lease token; the claim is the unit's admission, so starting it is not counted again
(``_claimed``, read by ``persist_dispatch_within``). Uses the ledger's pool (``_run``), lease,
host id and token map.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import offload.ledger.postgres.queue as work_queue
import offload.ledger.postgres.script as script
from offload.ledger.postgres.sql import queue_channel
from offload.ledger.postgres.sql import SQL as _SQL
from offload.ledger.protocol import DispatchRow, LedgerRow


class PostgresWorkQueue:
    def enqueue_unit(self, row: DispatchRow, now: float, held: bool = False) -> bool:
        """Queue a unit: for ``offload worker`` (any host), or ``held`` under this process's
        lease (queued at capacity); False if the id already exists."""
        queued_row = row if held else replace(row, owner_pid=None, owner_started_at=None)

        def write(conn: Any) -> bool:
            token = self.lease.token(conn, verify=True) if held else None
            # one round trip: the row and the work queue's notification (workers listen there)
            (inserted, _), _ = script.run(conn, [
                (work_queue._ENQUEUE, work_queue.queued_values(queued_row, now, self.host_id, token)),
                (script.NOTIFY_ANY, (queue_channel(self._schema), row.delegation_id))])
            return inserted > 0
        return self._run(write, create=True)

    def queued_rows(self) -> list[LedgerRow]:
        return self._select(_SQL.queued_where, ())

    def claim_queued(self, delegation_id: str, now: float, owner: tuple[int, int | None],
                     max_running: int) -> LedgerRow | None:
        def take(conn: Any) -> LedgerRow | None:
            token = self.lease.token(conn, verify=True)
            row = work_queue.claim_one(conn, delegation_id, now, self.host_id, owner, token, max_running)
            if row is not None:  # its claim is its admission: starting it does not count it again
                self._tokens[row.delegation_id] = token
                self._claimed.add(row.delegation_id)
            return row
        return self._run(take, create=True)

    def requeue_unit(self, row: DispatchRow, now: float) -> None:
        self._claimed.discard(row.delegation_id)
        self._tokens.pop(row.delegation_id, None)

        def write(conn: Any) -> None:
            token = self.lease.token(conn, verify=True)
            with conn.transaction():
                work_queue.requeue(conn, work_queue.queued_values(row, now, self.host_id, token), now,
                                   row.delegation_id)
        self._run(write, create=True)

    def claim_queued_unit(self, now: float, max_running: int) -> LedgerRow | None:
        """The oldest queued unit, now running under this process's lease, if fewer than
        ``max_running`` units run on all hosts together; else None (``fleet_full`` then says
        whether it was for want of a slot). One round trip (``postgres.queue.claim``)."""
        def take(conn: Any) -> LedgerRow | None:
            token, (row, room) = self._leased(conn, lambda token: work_queue.claim(
                conn, now, self.host_id, self.owner(), token, max_running))
            self.fleet_full = not room
            if row is not None:
                self._tokens[row.delegation_id] = token
                self._claimed.add(row.delegation_id)
            return row
        return self._run(take, create=True)
