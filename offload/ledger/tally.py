"""What ``/metrics`` and the dashboard's overview count from a ledger: its units by (state,
delivery state), now, finished recently, and ever.

Counters must never go down, but ``prune`` deletes settled rows. So prune adds every row it
deletes to ``offload_pruned_units`` (one row per (state, delivery state), made by the first
prune that deletes anything, in prune's own transaction), and a count over the ledger's life is
the rows there now plus the pruned ones. A unit the stall monitor stopped (its event's
``stop_reason`` is ``stall``) is tallied as ``stalled`` whatever its row's state (mostly
``interrupted``: the child honoured the interrupt), as ``/metrics`` counts it, so the stall
stays counted after prune; units an older version pruned were tallied by their row's state. A read is two aggregate statements (one GROUP BY over
the delegation table, one read of a table of a few rows): what a scrape costs does not grow
with the rows fetched into Python, and no row limit caps a figure. The same GROUP BY counts,
per key, the rows that finished at or after a given time (the overview's "failed in the last
hour"), so both readers share one operation and one scan.

Invariants: nothing here creates a table on a read (a ledger never pruned, or written by an
older version, has no pruned units); the statements are written once and rendered per dialect
(``delivery_sql.Dialect``). No I/O here: the backends run the statements.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from offload.engine.states import COMPLETED, STALLED, STOP_STALL
from offload.ledger.delivery_sql import POSTGRES, SQLITE, Dialect
from offload.ledger.reads import Key, UnitCounts  # what a tally read returns

PRUNED_TABLE = "offload_pruned_units"


_BY_STATE = ("SELECT state, delivery_state, count(*), coalesce(sum(delivery_attempts), 0), {recent}"
             " FROM async_delegations GROUP BY state, delivery_state")


@dataclass(frozen=True)
class TallySql:
    """The statements of one dialect; the comment after each lists its parameters."""

    create: str  # ()
    add: str  # (state, delivery_state, units)
    by_state: str  # () -> (state, delivery_state, rows, delivery attempts, 0)
    by_state_since: str  # (since,) -> the same, the last column the rows finished at or after since
    pruned: str  # () -> (state, delivery_state, units)
    stops_since: str  # (since,) -> (state, stop_reason, units) of the early stops finished at or after since
    returning: str  # appended to prune's DELETE statements: the deleted rows' keys and stop reasons

    @classmethod
    def for_dialect(cls, dialect: Dialect, text: str, integer: str, reason: str) -> "TallySql":
        return cls(
            create=f"CREATE TABLE IF NOT EXISTS {PRUNED_TABLE} (state {text} NOT NULL, delivery_state "
                   f"{text} NOT NULL, units {integer} NOT NULL, PRIMARY KEY (state, delivery_state))",
            add=dialect.render(f"INSERT INTO {PRUNED_TABLE} (state, delivery_state, units) VALUES (?, ?, ?)"
                               f" ON CONFLICT (state, delivery_state) DO UPDATE SET"
                               f" units = {PRUNED_TABLE}.units + excluded.units"),
            by_state=_BY_STATE.format(recent="0"),
            # one CASE per row costs ~10 % of the scan: only the overview, which asks for it, pays it
            by_state_since=dialect.render(_BY_STATE.format(recent="sum(CASE WHEN completed_at >= ? THEN 1 ELSE 0 END)")),
            pruned=f"SELECT state, delivery_state, units FROM {PRUNED_TABLE}",
            stops_since=dialect.render(_STOPS.format(reason=reason)),
            returning=f" RETURNING state, delivery_state, {reason}")


# The event's stop_reason, read only from the rows finished in the window (the completed_at
# index) that did not complete: SQLite's JSON functions (a malformed event reads as none), on
# PostgreSQL a match on the text column (a quote inside a JSON string is escaped, so a summary
# that quotes the key cannot match).
_STOPS = ("SELECT state, {reason}, count(*) FROM async_delegations WHERE completed_at >= ?"
          " AND state <> 'completed' AND {reason} IS NOT NULL GROUP BY state, {reason}")
SQLITE_TALLY = TallySql.for_dialect(
    SQLITE, "TEXT", "INTEGER", "(CASE WHEN json_valid(event_json) THEN json_extract(event_json, '$.stop_reason') END)")
POSTGRES_TALLY = TallySql.for_dialect(
    POSTGRES, "text", "bigint", r"""substring(event_json from '"stop_reason":\s*"([a-z]+)"')""")


def tallied_state(state: str, reason: str | None) -> str:
    """The state a row is tallied (and counted finished) under: ``stalled`` when the stall
    monitor stopped it, else its own."""
    return STALLED if reason == STOP_STALL and state != COMPLETED else state


def pruned_keys(deleted: Iterable[Iterable[Any]]) -> Counter[Key]:
    """The (tallied state, delivery_state) of each row a ``DELETE … RETURNING`` removed, counted."""
    return Counter((tallied_state(str(state), reason), str(delivery)) for state, delivery, reason in deleted)


def add_pruned(execute: Callable[..., Any], sql: TallySql, keys: Counter[Key]) -> None:
    """Add ``keys`` to the pruned table (made here if missing), on prune's connection and transaction."""
    if not keys:
        return
    execute(sql.create)
    for (state, delivery), units in sorted(keys.items()):
        execute(sql.add, (state, delivery, units))


def prune_counted(execute: Callable[..., Any], sql: TallySql, expired: str, over_cap: str, cutoff: float,
                  max_settled: int) -> int:
    """Run prune's two DELETE statements (``expired`` with ``cutoff``, ``over_cap`` with
    ``max_settled``) and tally what they deleted, in the caller's transaction; the rows deleted."""
    deleted = execute(expired + sql.returning, (cutoff,)).fetchall()
    deleted += execute(over_cap + sql.returning, (max_settled,)).fetchall()
    add_pruned(execute, sql, pruned_keys(deleted))  # counters over the ledger's life never go down
    return len(deleted)


def grouped(sql: TallySql, since: float | None) -> tuple[str, tuple[Any, ...]]:
    """The GROUP BY to run and its parameters: with the recent column only when ``since`` is asked."""
    return (sql.by_state, ()) if since is None else (sql.by_state_since, (since,))


def counts(by_state: Iterable[Iterable[Any]], pruned: Iterable[Iterable[Any]],
           stops: Iterable[Iterable[Any]] = ()) -> UnitCounts:
    """A ``UnitCounts`` from the rows the aggregate statements returned."""
    rows, recent, attempts = {}, {}, 0
    for state, delivery, units, tried, finished_since in by_state:
        key = (str(state), str(delivery))
        rows[key] = int(units)
        attempts += int(tried or 0)
        if finished_since:
            recent[key] = int(finished_since)
    return UnitCounts(rows, {(str(s), str(d)): int(n) for s, d, n in pruned}, attempts, recent,
                      {(str(s), str(r)): int(n) for s, r, n in stops})
