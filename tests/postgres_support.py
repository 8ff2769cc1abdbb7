"""A real PostgreSQL for the tests: the server ``.ci/postgres-up`` starts, one fresh schema per
use. Without ``OFFLOAD_TEST_POSTGRES_DSN`` a test needing it skips with the command that
provides it -- except under ``CI=true``, where a missing server is a failure.
"""
from __future__ import annotations

import os
import uuid
from urllib.parse import quote

import pytest

START_COMMAND = 'eval "$(.ci/postgres-up)"'


def postgres_dsn() -> str:
    dsn = os.environ.get("OFFLOAD_TEST_POSTGRES_DSN", "").strip()
    if dsn:
        return dsn
    message = f"needs PostgreSQL: run `{START_COMMAND}` first (sets OFFLOAD_TEST_POSTGRES_DSN)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but OFFLOAD_TEST_POSTGRES_DSN is not set; .ci/run must start it: {message}")
    pytest.skip(message)


class FreshSchema:
    """A new empty schema on the test server; ``url`` points a ledger at it."""

    def __init__(self) -> None:
        import psycopg

        self.dsn = postgres_dsn()
        self.name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {self.name}")
        sep = "&" if "?" in self.dsn else "?"
        self.url = f"{self.dsn}{sep}options={quote(f'-csearch_path={self.name}')}"

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")


_per_home: dict[str, FreshSchema] = {}


def ledger_env_for(home) -> dict[str, str]:
    """In a PostgreSQL run (``OFFLOAD_TEST_LEDGER=postgresql``), a fresh schema per ``home`` --
    one per simulated process tree, e.g. per kill-fuzz trial -- as ``OFFLOAD_LEDGER_URL``."""
    if os.environ.get("OFFLOAD_TEST_LEDGER", "") != "postgresql":
        return {}
    schema = _per_home.get(str(home))
    if schema is None:
        schema = _per_home[str(home)] = FreshSchema()
    return {"OFFLOAD_LEDGER_URL": schema.url}


def drop_per_home_schemas() -> None:
    while _per_home:
        _per_home.popitem()[1].drop()


def pg_ledger_rows(columns: str) -> list[tuple] | None:
    """``SELECT columns`` of every ledger row when this run keeps the ledger in PostgreSQL
    (``OFFLOAD_LEDGER_URL`` set), else None -- for tests that inspect raw rows on both backends."""
    url = os.environ.get("OFFLOAD_LEDGER_URL", "").strip()
    if not url:
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        try:
            return conn.execute(f"SELECT {columns} FROM async_delegations").fetchall()
        except psycopg.errors.UndefinedTable:
            return []


# A kill-fuzz owner and its restorer act as different hosts on a PostgreSQL ledger, so recovery
# goes through lease expiry (not the same-host pid check); the lease is short to keep trials quick.
FUZZ_LEASE_S, FUZZ_HEARTBEAT_S = 1.0, 0.25


def host_env_for(home, host_id: str) -> dict[str, str]:
    """In a PostgreSQL run, the environment (and ``home``'s config.yaml: a short lease) of a
    process acting as host ``host_id``; nothing otherwise."""
    if os.environ.get("OFFLOAD_TEST_LEDGER", "") != "postgresql":
        return {}
    import yaml
    from pathlib import Path

    config = Path(home) / "config.yaml"
    if not config.exists():
        config.write_text(yaml.safe_dump({"ledger": {"lease_seconds": FUZZ_LEASE_S,
                                                     "heartbeat_seconds": FUZZ_HEARTBEAT_S}}))
    return {"OFFLOAD_HOST_ID": host_id}


def wait_for_dead_owners_leases(timeout_s: float = 30.0) -> None:
    """On a PostgreSQL ledger (``OFFLOAD_LEDGER_URL`` set), wait until no running row's owner
    lease is live on the database clock: a restorer on another host may recover them then."""
    url = os.environ.get("OFFLOAD_LEDGER_URL", "").strip()
    if not url:
        return
    import time

    import psycopg

    deadline = time.monotonic() + timeout_s
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            try:
                live = conn.execute(
                    "SELECT count(*) FROM async_delegations d JOIN async_delegation_owners o"
                    " ON o.token = d.owner_token WHERE d.state = 'running'"
                    " AND o.expires_at > extract(epoch from clock_timestamp())").fetchone()[0]
            except psycopg.errors.UndefinedTable:
                return
            if not live:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{live} running row(s) still have a live owner lease after {timeout_s:g}s")
            time.sleep(0.05)
