"""The PostgreSQL ledger's side tables: control requests, live activity snapshots, the tally
of pruned units and the journal, shared by every host (the same contract as ``sqlite_side``).

A control request is one upsert plus ``pg_notify`` on the ledger's control channel in the
same transaction, so an owner on any host that LISTENs there wakes at once (a missed
notification is caught by its slow poll). Taking a request is one ``DELETE … RETURNING``,
so of two processes that race for it exactly one gets it. The tables are part of the
ledger's schema (migration 4 in ``offload.ledger.migrations``, under the schema's advisory
lock): a write makes the schema first; reads of a database without them return nothing.
"""
from __future__ import annotations

from typing import Any, Callable


from offload.engine.loop import Clock
from offload.ledger.codec import dumps, loads
from offload.ledger.postgres.listen import CompletionListener
from offload.ledger.protocol import JournalEntry
from offload.ledger.tally import POSTGRES_TALLY, PRUNED_TABLE, UnitCounts, counts, grouped

SIDE_TABLES = (
    "CREATE TABLE IF NOT EXISTS async_delegation_controls (delegation_id text PRIMARY KEY,"
    " action text NOT NULL, requested_at double precision NOT NULL, expires_at double precision NOT NULL)",
    "CREATE TABLE IF NOT EXISTS async_delegation_activity (delegation_id text PRIMARY KEY,"
    " written_at double precision NOT NULL, snapshot_json text NOT NULL)",
    POSTGRES_TALLY.create,
    "CREATE TABLE IF NOT EXISTS async_delegation_journal (entry_id bigserial PRIMARY KEY, delegation_id text NOT NULL,"
    " at double precision NOT NULL, kind text NOT NULL, child integer, data_json text NOT NULL)",
    "CREATE INDEX IF NOT EXISTS idx_async_delegation_journal ON async_delegation_journal(delegation_id, entry_id)",
)
# Journal entries and approval requests whose row is gone: run with the prune, in its transaction.
_PRUNE_SIDE_RECORDS = {table: f"DELETE FROM {table} s WHERE NOT EXISTS (SELECT 1 FROM async_delegations d"
                              " WHERE d.delegation_id = s.delegation_id)"
                       for table in ("async_delegation_journal", "async_delegation_approvals", "async_delegation_steps")}
_UPSERT_CONTROL = ("INSERT INTO async_delegation_controls VALUES (%s,%s,%s,%s) ON CONFLICT (delegation_id)"
                   " DO UPDATE SET action=excluded.action, requested_at=excluded.requested_at,"
                   " expires_at=excluded.expires_at")
_UPSERT_ACTIVITY = ("INSERT INTO async_delegation_activity VALUES (%s,%s,%s) ON CONFLICT (delegation_id)"
                    " DO UPDATE SET written_at=excluded.written_at, snapshot_json=excluded.snapshot_json")


def control_channel(schema: str) -> str:
    """The NOTIFY channel of one ledger's control requests (PostgreSQL names: 63 bytes)."""
    return f"offload_control_{schema}"[:63]


class PostgresSideTables:
    """Mixed into ``PostgresLedger``: uses its ``_run`` (pooled connection, one retry),
    ``url``, ``location`` and ``clock``."""

    clock: Clock | None = None

    def request_control(self, delegation_id: str, action: str, now: float, expires_at: float) -> None:
        def write(conn: Any) -> None:
            with conn.transaction():
                conn.execute(_UPSERT_CONTROL, (delegation_id, action, now, expires_at))
                conn.execute("SELECT pg_notify(left('offload_control_' || current_schema(), 63), %s)",
                             (delegation_id,))
        self._run(write, create=True)

    def withdraw_control(self, delegation_id: str) -> None:
        self._run(lambda conn: conn.execute("DELETE FROM async_delegation_controls WHERE delegation_id=%s",
                                            (delegation_id,)), missing=None)

    def requested_controls(self, now: float) -> list[str]:
        return [r[0] for r in self._run(lambda conn: conn.execute(
            "SELECT delegation_id FROM async_delegation_controls WHERE expires_at > %s", (now,)).fetchall(),
            missing=[])]

    def take_control(self, delegation_ids: list[str], now: float) -> list[tuple[str, str]]:
        def take(conn: Any) -> list[tuple[str, str]]:
            if conn.execute("SELECT EXISTS (SELECT 1 FROM async_delegation_controls)").fetchone()[0] is False:
                return []  # the common case: one index probe, no write
            conn.execute("DELETE FROM async_delegation_controls WHERE expires_at <= %s", (now,))
            return [tuple(r) for r in conn.execute(
                "DELETE FROM async_delegation_controls WHERE delegation_id = ANY(%s) RETURNING delegation_id, action",
                (list(delegation_ids),)).fetchall()]
        return self._run(take, missing=[])

    def write_activity(self, snapshots: dict[str, dict[str, Any]], gone: list[str], now: float) -> None:
        def write(conn: Any) -> None:
            with conn.transaction():
                if snapshots:
                    with conn.cursor() as cur:
                        cur.executemany(_UPSERT_ACTIVITY, [(did, now, dumps(s)) for did, s in snapshots.items()])
                if gone:
                    conn.execute("DELETE FROM async_delegation_activity WHERE delegation_id = ANY(%s)", (gone,))
                    conn.execute("DELETE FROM async_delegation_activity a WHERE NOT EXISTS (SELECT 1 FROM"
                                 " async_delegations d WHERE d.delegation_id = a.delegation_id AND d.state='running')")
        self._run(write, create=True)

    def read_activity(self, delegation_ids: list[str]) -> dict[str, tuple[float, dict[str, Any]]]:
        if not delegation_ids:
            return {}
        found = self._run(lambda conn: conn.execute(
            "SELECT delegation_id, written_at, snapshot_json FROM async_delegation_activity"
            " WHERE delegation_id = ANY(%s)", (list(delegation_ids),)).fetchall(), missing=[])
        return {did: (written_at, loads(snapshot) or {}) for did, written_at, snapshot in found}

    def unit_counts(self, since: float | None = None) -> UnitCounts:
        def read(conn: Any) -> UnitCounts:
            by_state = conn.execute(*grouped(POSTGRES_TALLY, since)).fetchall()
            stops = conn.execute(POSTGRES_TALLY.stops_since, (since,)).fetchall() if since is not None else []
            tallied = conn.execute(f"SELECT to_regclass('{PRUNED_TABLE}') IS NOT NULL").fetchone()[0]
            return counts(by_state, conn.execute(POSTGRES_TALLY.pruned).fetchall() if tallied else [], stops)
        self._catch_up()
        return self._run(read, missing=UnitCounts())

    def append_journal(self, entries: list[JournalEntry]) -> None:
        def write(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("INSERT INTO async_delegation_journal (delegation_id, at, kind, child, data_json)"
                                " VALUES (%s,%s,%s,%s,%s)",
                                [(e.delegation_id, e.at, e.kind, e.child, dumps(e.data)) for e in entries])
        if entries:
            self._run(write, create=True)

    def read_journal(self, delegation_id: str) -> list[JournalEntry]:
        found = self._run(lambda conn: conn.execute(
            "SELECT at, kind, child, data_json FROM async_delegation_journal WHERE delegation_id=%s ORDER BY entry_id",
            (delegation_id,)).fetchall(), missing=[])
        return [JournalEntry(delegation_id, at, kind, child, loads(data) or {}) for at, kind, child, data in found]

    @staticmethod
    def _prune_side_records(conn: Any) -> None:
        """In the prune's transaction; a table the database lacks has nothing to prune."""
        for table, statement in _PRUNE_SIDE_RECORDS.items():
            if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is not None:
                conn.execute(statement)

    def watch_control(self, on_ids: Callable[[list[str] | None], None]) -> CompletionListener:
        """A started listener calling ``on_ids`` when a control request is made on any host
        (``None`` after a reconnect: some may have been missed); the caller stops it."""
        if self._bad_url is not None:
            raise self._bad_url
        return CompletionListener(self.url, self.location, on_ids, channel=control_channel,
                                  clock=self.clock).start()



