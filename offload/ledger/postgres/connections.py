"""The PostgreSQL ledger's connections: one ``psycopg_pool`` pool of autocommit connections
per ledger, checked before use when they sat idle, and the schema made (or migrated) on the
first write.

Owns ``PostgresConnections._run(fn)``, the one way the ledger touches the server. Invariants:
a server restart or a terminated backend costs one reconnect, not an error (an operation that
lost its connection mid-flight is retried once, after the pool's idle connections were checked
and the dead ones replaced); every failure is a
``LedgerError`` with one kind per cause; while the server is down, one direct connection
attempt per ``PROBE_INTERVAL_S`` names the real cause and other callers fail at once instead of
each waiting out the pool's timeout; a read never creates the tables.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, Callable, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from offload.ledger.protocol import LedgerError
from offload.ledger.postgres.errors import classify, error_kind, redact
from offload.ledger.migrations import POSTGRES_LEDGER
from offload.ledger.postgres.sql import SCHEMA_LOCK_KEY, TABLE_EXISTS
from offload.ledger.versions import check_postgres, migrate_postgres

logger = logging.getLogger("offload.engine")
_T = TypeVar("_T")
MISSING = object()  # "no ``missing`` value given": a read of absent tables raises
POOL_TIMEOUT_S = 10.0  # a checkout waits this long: on a loaded host a SCRAM login alone takes seconds
POOL_MAX_SIZE = 8
PROBE_TIMEOUT_S = 10
PROBE_INTERVAL_S = 1.0  # while the server is down, one connection attempt per interval; others fail fast
# A connection back in the pool for less than this just worked: it is lent again without a
# liveness round trip (busy ledgers reuse connections within milliseconds). One that dies
# meanwhile fails its operation, which ``_run`` retries after checking the whole pool.
CHECK_IDLE_S = 1.0
_returned_at: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()


def _check_if_idle(conn: Any) -> None:
    """The pool's ``check`` callback: a round trip only for a connection that sat idle."""
    if time.monotonic() - _returned_at.get(conn, 0.0) > CHECK_IDLE_S:
        ConnectionPool.check_connection(conn)


class PostgresConnections:
    """The connection pool and schema of one ledger URL; ``PostgresLedger`` builds on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.location = redact(url)  # the label log lines and log-once bookkeeping use
        self._pool: ConnectionPool | None = None
        self._pool_lock = threading.Lock()
        self._schema: str | None = None  # set once the tables are known to exist at this version
        self._version_checked: str | None = None  # set once the version is known not to be newer
        self._down: LedgerError | None = None  # why the server was unusable at the last attempt
        self._down_at = 0.0
        try:
            conninfo_to_dict(url)
            self._bad_url: LedgerError | None = None
        except psycopg.Error as exc:
            self._bad_url = classify(self.location, exc, self.url)

    def _get_pool(self) -> ConnectionPool:
        if self._bad_url is not None:
            raise self._bad_url
        with self._pool_lock:
            if self._pool is None or self._down is not None:
                self._probe()
            if self._pool is None:
                # The pool logs every failed reconnect; we log one line per cause instead.
                logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
                self._pool = ConnectionPool(self.url, min_size=1, max_size=POOL_MAX_SIZE, open=False,
                                            timeout=POOL_TIMEOUT_S, kwargs={"autocommit": True},
                                            check=_check_if_idle, name="offload-ledger")
                self._pool.open(wait=False)
            return self._pool

    def _run(self, fn: Callable[[Any], _T], *, create: bool = False, missing: Any = MISSING) -> _T:
        """``fn(conn)`` on a pooled connection. ``create``: make the tables first; ``missing``:
        what a read returns when the tables do not exist (it never creates them)."""
        for attempt in (1, 2):
            try:
                with self._get_pool().connection() as conn:
                    if create:
                        self._ensure_schema(conn)
                    else:
                        self._check_version(conn)
                    result = fn(conn)
                    # Not the pool's ``reset`` callback: with one, the pool hands every returned
                    # connection to its worker thread (a thread switch per operation, and the
                    # connection is lent again only once that thread ran).
                    _returned_at[conn] = time.monotonic()
                    return result
            except psycopg.errors.UndefinedTable as exc:
                self._schema = None
                if not create and missing is not MISSING:
                    return missing
                if attempt == 2:
                    raise classify(self.location, exc, self.url) from exc
            except PoolTimeout as exc:
                self._down, self._down_at = self._why_unreachable(exc), time.monotonic()
                raise self._down from exc
            except (psycopg.Error, OSError) as exc:
                # the connection died under us (server restart, terminated backend): once more on a fresh one
                if attempt == 2 or error_kind(exc) != "unreachable":
                    error = classify(self.location, exc, self.url)
                    if error.kind == "unreachable":
                        self._down, self._down_at = error, time.monotonic()
                    raise error from exc
                self._drop_dead_connections()
            except (ValueError, OverflowError) as exc:
                # a value PostgreSQL cannot store (a lone surrogate in a session key): a failed
                # write like any other, never a crash of the caller
                raise classify(self.location, exc, self.url) from exc
        raise AssertionError("unreachable")

    def _drop_dead_connections(self) -> None:
        """Check every idle pooled connection (replacing the dead ones): after a restart they
        all died together, and recently used ones are lent without a check."""
        pool = self._pool
        if pool is not None:
            try:
                pool.check()
            except Exception:  # the retry itself reports what is wrong
                logger.debug("checking the pool's connections failed", exc_info=True)

    def _probe(self) -> None:
        """Connect once directly: a server that is down, or refuses us, fails here in
        milliseconds with its real cause instead of after the pool's timeout. While it stays
        down, callers within ``PROBE_INTERVAL_S`` of the last attempt fail at once."""
        if self._down is not None and time.monotonic() - self._down_at < PROBE_INTERVAL_S:
            raise self._down
        try:
            psycopg.connect(self.url, connect_timeout=PROBE_TIMEOUT_S).close()
        except (psycopg.Error, OSError) as exc:
            self._down, self._down_at = classify(self.location, exc, self.url), time.monotonic()
            raise self._down from exc
        self._down = None

    def _why_unreachable(self, exc: PoolTimeout) -> LedgerError:
        """The pool only says it timed out; one direct attempt names the real cause."""
        try:
            psycopg.connect(self.url, connect_timeout=PROBE_TIMEOUT_S).close()
        except psycopg.Error as direct:
            return classify(self.location, direct, self.url)
        return classify(self.location, exc, self.url)

    def _ensure_schema(self, conn: Any) -> None:
        """The tables at this version (``offload.ledger.versions``): one read when they are."""
        if self._schema is not None:
            return
        migrate_postgres(conn, POSTGRES_LEDGER, self.location, SCHEMA_LOCK_KEY)
        self._schema = self._version_checked = conn.execute("SELECT current_schema()").fetchone()[0]

    def _check_version(self, conn: Any) -> None:
        """Once per schema: a read refuses a ledger a newer offload migrated (``SchemaTooNew``),
        and brings one an older offload made up to this version first (its reads name columns
        the older layout lacks); a read still never creates the tables."""
        if self._version_checked is None:
            found = check_postgres(conn, POSTGRES_LEDGER, self.location)
            if found < POSTGRES_LEDGER.version and conn.execute(TABLE_EXISTS).fetchone()[0]:
                self._ensure_schema(conn)
            self._version_checked = conn.execute("SELECT current_schema()").fetchone()[0]
