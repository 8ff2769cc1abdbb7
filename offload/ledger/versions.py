"""Schema versions of what offload stores, kept in the store itself: one ``offload_schema`` row
(``component``, ``version``) per component — ``ledger`` (the delegation tables, SQLite or
PostgreSQL) and ``sessions`` (the session store's tables in ``state.db``).

A component is an ordered list of migrations; ``migrations[i]`` takes version ``i`` to ``i + 1``,
so its version is the length of the list. Version 0 is a store made before versions existed
(its tables, no version row) or no store at all: migration 1 creates or reconciles the tables
without touching their rows, so what the previous layout stored stays readable.

Invariants: on open, every missing migration runs in ONE transaction under the store's write
lock (``BEGIN IMMEDIATE``; a PostgreSQL advisory lock), together with the new version row, so
processes that start together migrate once and a failed migration leaves the store as it was;
a store already at this version costs one read; a store at a NEWER version is never changed
and never used: ``SchemaTooNew`` names both versions and the fix (upgrade offload), so an older
offload on a shared PostgreSQL ledger stops instead of writing rows the newer one misreads.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Callable

from offload.ledger.protocol import LedgerError

Migration = Callable[[Any], None]  # one step, on the open connection inside the transaction

SQLITE_TABLE = ("CREATE TABLE IF NOT EXISTS offload_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL,"
                " migrated_at REAL NOT NULL)")
POSTGRES_TABLE = ("CREATE TABLE IF NOT EXISTS offload_schema (component text PRIMARY KEY, version integer NOT NULL,"
                  " migrated_at double precision NOT NULL)")


@dataclass(frozen=True)
class Component:
    name: str
    migrations: tuple[Migration, ...]

    @property
    def version(self) -> int:
        return len(self.migrations)


class SchemaTooNew(LedgerError):
    """A newer offload has migrated this store; this one must not read or write it."""

    def __init__(self, component: Component, found: int, where: str) -> None:
        super().__init__(
            f"{where} holds offload's {component.name} schema version {found}, but this offload knows versions up "
            f"to {component.version}: a newer offload has upgraded it. Upgrade offload here (pip install -U "
            f"offload); every process that shares it must run an offload that knows version {found}", kind="too_new")
        self.found, self.known = found, component.version


# -- SQLite -------------------------------------------------------------------------------------
def sqlite_version(conn: sqlite3.Connection, name: str) -> int:
    """The component's version in this file; 0 without a version row (or a version table)."""
    try:
        row = conn.execute("SELECT version FROM offload_schema WHERE component=?", (name,)).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return 0
    return int(row[0]) if row else 0


def check_sqlite(conn: sqlite3.Connection, component: Component, where: str) -> int:
    """The version found; ``SchemaTooNew`` if it is newer than this offload knows (reads only)."""
    found = sqlite_version(conn, component.name)
    if found > component.version:
        raise SchemaTooNew(component, found, where)
    return found


def migrate_sqlite(conn: sqlite3.Connection, component: Component, where: str) -> None:
    """Bring the component to this offload's version, in one transaction (see the module doc)."""
    if check_sqlite(conn, component, where) == component.version:
        return
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN IMMEDIATE")
    try:
        found = check_sqlite(conn, component, where)  # again under the write lock: another process may have won
        if found < component.version:
            conn.execute(SQLITE_TABLE)
            for step in component.migrations[found:]:
                step(conn)
            conn.execute("INSERT OR REPLACE INTO offload_schema (component, version, migrated_at) VALUES (?, ?, ?)",
                         (component.name, component.version, time.time()))
    except BaseException:
        if own:
            conn.execute("ROLLBACK")
        raise
    if own:
        conn.execute("COMMIT")


# -- PostgreSQL ---------------------------------------------------------------------------------
def postgres_version(conn: Any, name: str) -> int:
    if not conn.execute("SELECT to_regclass('offload_schema') IS NOT NULL").fetchone()[0]:
        return 0
    row = conn.execute("SELECT version FROM offload_schema WHERE component=%s", (name,)).fetchone()
    return int(row[0]) if row else 0


def check_postgres(conn: Any, component: Component, where: str) -> int:
    found = postgres_version(conn, component.name)
    if found > component.version:
        raise SchemaTooNew(component, found, where)
    return found


def migrate_postgres(conn: Any, component: Component, where: str, lock_key: str) -> None:
    """As ``migrate_sqlite``, under a transaction-scoped advisory lock on ``lock_key`` and the
    connection's schema."""
    if check_postgres(conn, component, where) == component.version:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s || current_schema()))", (lock_key,))
        found = check_postgres(conn, component, where)
        if found < component.version:
            conn.execute(POSTGRES_TABLE)
            for step in component.migrations[found:]:
                step(conn)
            conn.execute("INSERT INTO offload_schema (component, version, migrated_at) VALUES (%s, %s, %s)"
                         " ON CONFLICT (component) DO UPDATE SET version=excluded.version,"
                         " migrated_at=excluded.migrated_at", (component.name, component.version, time.time()))
