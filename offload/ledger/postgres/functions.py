"""A unit's dispatch and its completion as server-side functions (ledger migration 7, issue 31).

These are the two writes on the path of every delegation. As a script of statements
(``postgres.script``) each one carried its values as literals in the query text: the client
quoted every value (the completion's result twice, for the vanished-row fallback) and the
server parsed them again. As a function each is one statement with its values bound by the
server (psycopg's extended protocol; psycopg prepares it on a connection after a few uses),
so a dispatch costs less CPU on both sides and a shorter wait (on the benchmark's machine
~230 -> ~190 us a dispatch alone, see docs/benchmarks.md case 5).

Semantics are the scripts': one transaction; the fence lock (and, for a dispatch within the
cross-host capacity, the capacity lock first, in the order every claim takes them) is taken
before anything is read; each statement of a ``VOLATILE`` PL/pgSQL function takes a fresh
snapshot, so the lease check and the slot count after the locks see every commit of a
takeover or of the locks' previous holders, exactly as the script's next statement did.
Return codes: ``LEASE_GONE`` (nothing written: the caller retries under a new lease or reports
the fence), otherwise the rows written (a completion that finds no row running under its
token writes nothing and returns 0: the caller sends the whole row, ``postgres.script``).

The functions live in the ledger's schema and are made by the migration, so every process on
one ledger runs the same body (a fleet runs one version, docs/postgres.md). A function whose
arguments change is a new migration that drops the old signature.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Sequence

import offload.ledger.postgres.prepared as prepared
from offload.ledger.postgres.capacity import CAPACITY_LOCK_KEY, LIVE_SLOTS
from offload.ledger.postgres.lease import FENCE_LOCK
from offload.ledger.postgres.riders import RETRY, Rider
import offload.ledger.postgres.script as script
from offload.ledger.postgres.script import LEASED, LOCK_CAPACITY, _TYPES
from offload.ledger.postgres.sql import _WRITE_COLUMNS, INSERT_DISPATCH, UPDATE_COMPLETION

LEASE_GONE = -1
_ROW = tuple((f"p_{column}", _TYPES[column]) for column in _WRITE_COLUMNS)
# UPDATE_COMPLETION's placeholders, in order
_COMPLETION = (("p_state", "text"), ("p_completed_at", "double precision"), ("p_updated_at", "double precision"),
               ("p_event_json", "text"), ("p_result_json", "text"), ("p_delegation_id", "text"),
               ("p_token", "bigint"))
assert "'" not in CAPACITY_LOCK_KEY


def _bound(sql: str, names: Sequence[str]) -> str:
    """``sql`` with its ``%s`` placeholders, in order, replaced by ``names``."""
    assert sql.count("%s") == len(names), sql
    values = iter(names)
    return re.sub(r"%s", lambda _m: next(values), sql)


def _perform(select: str, *names: str) -> str:
    return "PERFORM " + _bound(select.removeprefix("SELECT "), names)


def _create(name: str, params: Sequence[tuple[str, str]], body: str) -> str:
    declared = ", ".join(f"{param} {kind}" for param, kind in params)
    return (f"CREATE OR REPLACE FUNCTION {name}({declared}) RETURNS integer LANGUAGE plpgsql VOLATILE AS $offload$\n"
            f"DECLARE written integer;\nBEGIN\n{body}\nEND\n$offload$")


def _call(name: str, params: Sequence[tuple[str, str]]) -> str:
    """The call as an expression of a select list, its arguments cast to the declared types."""
    return f"{name}({', '.join(f'%s::{kind}' for _, kind in params)})"


_LEASE_CHECK = f"  IF NOT{_bound(LEASED, ['p_token'])} THEN RETURN {LEASE_GONE}; END IF;"
_DISPATCH_PARAMS = (("p_token", "bigint"), ("p_max_running", "bigint"), *_ROW[:-1])  # the row's last: the token
DISPATCH = _create("offload_dispatch", _DISPATCH_PARAMS, "\n".join((
    "  IF p_max_running IS NOT NULL THEN",
    f"    {_perform(LOCK_CAPACITY, repr(CAPACITY_LOCK_KEY))};",
    "  END IF;",
    f"  {_perform(FENCE_LOCK, 'p_token')};",
    _LEASE_CHECK,
    f"  IF p_max_running IS NOT NULL AND ({LIVE_SLOTS}) >= p_max_running THEN RETURN 0; END IF;",
    f"  {_bound(INSERT_DISPATCH, [name for name, _ in _ROW[:-1]] + ['p_token'])};",
    "  GET DIAGNOSTICS written = ROW_COUNT;",
    "  RETURN written;")))
_COMPLETE_PARAMS = (*_COMPLETION, ("p_channel", "text"))
COMPLETE = _create("offload_complete", _COMPLETE_PARAMS, "\n".join((
    f"  {_perform(FENCE_LOCK, 'p_token')};",
    _LEASE_CHECK,
    f"  {_bound(UPDATE_COMPLETION, [name for name, _ in _COMPLETION])};",
    "  GET DIAGNOSTICS written = ROW_COUNT;",
    "  IF written > 0 THEN PERFORM pg_notify(p_channel, p_delegation_id); END IF;",
    "  RETURN written;")))
FUNCTIONS = (DISPATCH, COMPLETE)
_CALL_DISPATCH = _call("offload_dispatch", _DISPATCH_PARAMS)
_CALL_COMPLETE = _call("offload_complete", _COMPLETE_PARAMS)
_COMPLETE_ALONE = f"SELECT {_CALL_COMPLETE}"
_LOCK_CAPACITY = LOCK_CAPACITY.removeprefix("SELECT ")


def _row(conn: Any, call: str, params: Sequence[Any]) -> tuple[Any, ...]:
    """The call's one row. Prepared by psycopg after a few uses on a connection, unless this
    process found the server's sessions do not keep what it prepares (``postgres.prepared``):
    then, and after the failure that shows it (nothing of the call ran), never."""
    try:
        return conn.execute(call, params, prepare=None if prepared.enabled() else False).fetchone()
    except prepared.MISMATCH:
        prepared.mismatched()
        return conn.execute(call, params, prepare=False).fetchone()


def dispatch(conn: Any, values: Sequence[Any], token: int, max_running: int | None = None,
             riders: Sequence[Rider] = ()) -> tuple[bool, bool]:
    """Write the ``running`` row (``dispatch_values``, ``token`` last) under ``token``; with
    ``max_running`` only if a slot is free on all hosts (under the capacity lock). ``riders``:
    completions sent first in the same round trip and transaction, each answered here
    (``postgres.riders``). (whether the lease is held, whether the row was written)."""
    try:
        assert values[-1] == token
        # with riders, a dispatch within the capacity takes its lock before their fences
        written = _carrying(conn, riders, (token, max_running, *values[:-1]), bool(riders) and max_running is not None)
    finally:
        for rider in riders:
            if not rider.done.is_set():  # nothing committed (or nobody knows): it sends itself,
                rider.answer(RETRY)  # which after a lost connection is a no-op if this did commit
    return written != LEASE_GONE, written > 0


def _carrying(conn: Any, riders: Sequence[Rider], params: Sequence[Any], capacity: bool) -> int:
    """The riders' completions (none: the dispatch alone), then the dispatch, as one statement
    (``_carry``): one round
    trip, one transaction. The completions go first (PostgreSQL evaluates a select list left
    to right, and each function's statements see what the earlier ones wrote), so the
    dispatch's slot count no longer sees their units running. A dispatch within the capacity
    takes the capacity lock before them: locks in the order every claim takes them (capacity,
    then a fence), never a fence held while waiting for the capacity."""
    lock = (CAPACITY_LOCK_KEY,) if capacity else ()
    *results, written = _row(conn, _carry(len(riders), capacity),
                             [*lock, *(p for r in riders for p in r.params), *params])
    for rider, result in zip(riders, results[len(lock):]):
        rider.answer(result)
    return written


@functools.lru_cache(maxsize=None)
def _carry(riders: int, capacity: bool) -> str:
    return "SELECT " + ", ".join([_LOCK_CAPACITY] * capacity + [_CALL_COMPLETE] * riders + [_CALL_DISPATCH])


def completion(update: Sequence[Any], channel: str) -> tuple[Any, ...]:
    """The completion function's arguments (``update``: ``UPDATE_COMPLETION``'s values)."""
    return (*update, channel)


def complete(conn: Any, token: int, update: Sequence[Any], whole: Callable[[], Sequence[Any]], channel: str,
             delegation_id: str, written: int | None = None) -> bool:
    """The terminal write of the row running under ``token`` (``update``: ``UPDATE_COMPLETION``'s
    values) and its NOTIFY, only while the lease exists; whether it does. A row that no longer
    runs under the token is written ``whole()`` if it vanished (a second round trip, rare).
    ``written``: the function's result when a dispatch already carried it."""
    if written is None:
        [written] = _row(conn, _COMPLETE_ALONE, completion(update, channel))
    if written == 0:
        return script.complete_whole(conn, token, whole(), channel, delegation_id)
    return written != LEASE_GONE
