"""The hot scripts run as server-side prepared statements (``postgres.prepared``, issue 31):
each statement is prepared once per connection, in the same string as its first use, and used
from then on; a failed script leaves the connection usable (prepared statements outlive the
failed transaction, so the set is read back instead of guessed); results are the script's own."""
from __future__ import annotations

import psycopg
import pytest

import offload.ledger.postgres.prepared as postgres_prepared
import offload.ledger.postgres.script as postgres_script

pytestmark = pytest.mark.timeout(60)

ADD = "SELECT %s::bigint + %s::bigint"
DIVIDE = "SELECT 10 / %s::bigint"


def executions(conn, sql: str) -> int:
    """How often the server ran the prepared form of ``sql`` on this connection (0: not prepared)."""
    found = conn.execute("SELECT generic_plans + custom_plans FROM pg_prepared_statements WHERE name = %s",
                         (postgres_prepared.name_of(sql),)).fetchone()
    return 0 if found is None else found[0]


def test_each_statement_is_prepared_once_per_connection_and_then_executed(pg_schema):
    with psycopg.connect(pg_schema.url, autocommit=True) as conn:
        assert postgres_script.run(conn, [(ADD, (1, 2)), (DIVIDE, (5,))]) == [(1, [(3,)]), (1, [(2,)])]
        assert postgres_script.run(conn, [(DIVIDE, (2,)), (ADD, (4, 5))]) == [(1, [(5,)]), (1, [(9,)])]
        assert executions(conn, ADD) == 2 and executions(conn, DIVIDE) == 2
        text, new, _ = postgres_prepared.script(conn, [ADD])
        assert new == [] and text.startswith("EXECUTE ")
    with psycopg.connect(pg_schema.url, autocommit=True) as other:  # another session prepares its own
        assert postgres_script.run(other, [(ADD, (1, 1))]) == [(1, [(2,)])]


def test_a_failed_script_leaves_the_connection_usable(pg_schema):
    with psycopg.connect(pg_schema.url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            postgres_script.run(conn, [(ADD, (1, 2)), (DIVIDE, (0,))])  # both PREPAREs ran, then it failed
        assert postgres_script.run(conn, [(ADD, (1, 2)), (DIVIDE, (5,))]) == [(1, [(3,)]), (1, [(2,)])]
        assert executions(conn, ADD) == 2  # prepared by the failed script, used by both


def test_a_session_without_the_prepared_statements_falls_back_to_text(pg_schema, monkeypatch, caplog):
    """A transaction-pooling PgBouncer hands a connection another server session: what this
    process prepared is missing there (``DEALLOCATE ALL`` makes one such session)."""
    monkeypatch.setattr(postgres_prepared, "_enabled", True)  # restored for the other tests
    with psycopg.connect(pg_schema.url, autocommit=True) as conn:
        assert postgres_script.run(conn, [(ADD, (1, 2))]) == [(1, [(3,)])]
        conn.execute("DEALLOCATE ALL")
        assert postgres_script.run(conn, [(ADD, (2, 3)), (DIVIDE, (5,))]) == [(1, [(5,)]), (1, [(2,)])]
        assert postgres_prepared.script(conn, [ADD])[0] == ADD  # text from now on
        assert executions(conn, ADD) == 0 and "PgBouncer" in caplog.text
