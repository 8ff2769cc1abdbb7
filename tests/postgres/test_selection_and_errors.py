"""Choosing the ledger backend, and what each PostgreSQL failure looks like.

``ledger.url`` in config.yaml or ``OFFLOAD_LEDGER_URL`` selects PostgreSQL; SQLite stays the
default. Every failure cause is a ``LedgerError`` of its own kind whose one line names the
server (never the password) and the fix; the engine keeps running and delivers in memory,
logging one line per cause.
"""
from __future__ import annotations

import logging
import socket
from urllib.parse import urlsplit, urlunsplit

import pytest
import yaml

from tests.postgres_support import FreshSchema, postgres_dsn
from tools import async_delegation as ad
from tools import async_delegation_delivery as delivery
from offload.ledger import DispatchRow, LedgerError
from offload.ledger.select import MisconfiguredLedger
from offload.ledger.postgres.ledger import PostgresLedger
from offload.ledger.sqlite import SqliteLedger
from offload.subagents.config import ConfigError
from offload.home import config_path
from offload.ledger.config import load_ledger_config

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _fresh_delivery_state():
    delivery.reset_for_tests()
    yield
    delivery.reset_for_tests()


def write_config(data: dict) -> None:
    config_path().write_text(yaml.safe_dump(data))


def row(delegation_id: str = "deleg_sel") -> DispatchRow:
    return DispatchRow(delegation_id, "agent:main:x:dm:1", 1000.0, {"goal": "g"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- selection ----------------------------------------------------------------------------------
def test_sqlite_is_the_default(monkeypatch):
    monkeypatch.delenv("OFFLOAD_LEDGER_URL", raising=False)
    assert isinstance(delivery.current_ledger(), SqliteLedger)


def test_ledger_url_in_the_config_file_selects_postgresql(monkeypatch):
    monkeypatch.delenv("OFFLOAD_LEDGER_URL", raising=False)
    schema = FreshSchema()
    try:
        write_config({"ledger": {"url": schema.url, "host_id": "host-from-file", "lease_seconds": 30,
                                 "heartbeat_seconds": 5}})
        ledger = delivery.current_ledger()
        assert isinstance(ledger, PostgresLedger)
        assert (ledger.host_id, ledger.lease.lease_s, ledger.lease.heartbeat_s) == ("host-from-file", 30, 5)
        ledger.persist_dispatch(row(), 1000.0)
        assert ledger.get("deleg_sel").extra["owner_host"] == "host-from-file"
    finally:
        delivery.reset_for_tests()
        schema.drop()


def test_the_environment_wins_over_the_file_and_a_change_of_either_switches_backend(monkeypatch):
    schema = FreshSchema()
    try:
        write_config({"ledger": {"url": "postgresql://nobody@127.0.0.1:1/never"}})
        monkeypatch.setenv("OFFLOAD_LEDGER_URL", schema.url)
        assert delivery.current_ledger().url == schema.url
        monkeypatch.delenv("OFFLOAD_LEDGER_URL")
        assert delivery.current_ledger().url == "postgresql://nobody@127.0.0.1:1/never"
        write_config({})
        assert isinstance(delivery.current_ledger(), SqliteLedger)
    finally:
        delivery.reset_for_tests()
        schema.drop()


@pytest.mark.parametrize("section, complaint", [
    ({"url": "mysql://u@h/db"}, "ledger.url: must be a PostgreSQL URL"),
    ({"lease_seconds": 10, "heartbeat_seconds": 8}, "must be at most half of ledger.lease_seconds"),
    ({"lease_seconds": -1}, "ledger.lease_seconds"),
    ({"colour": "blue"}, "ledger.colour"),
])
def test_a_bad_ledger_section_is_an_error_naming_the_key_never_a_silent_sqlite(section, complaint, caplog):
    write_config({"ledger": section})
    with pytest.raises(ConfigError, match=complaint.replace(".", r"\.")):
        load_ledger_config()

    ledger = delivery.current_ledger()
    assert isinstance(ledger, MisconfiguredLedger)
    with pytest.raises(LedgerError) as err:
        ledger.persist_dispatch(row(), 1000.0)
    assert err.value.kind == "config" and complaint in str(err.value)
    assert ledger.exists() is False  # replay finds nothing instead of failing


def test_offload_config_set_refuses_a_bad_ledger_url_and_keeps_the_file():
    from offload.config import set_value

    write_config({"model": "m"})
    before = config_path().read_bytes()
    with pytest.raises(ConfigError, match="ledger.url"):
        set_value("ledger.url", "sqlite:///tmp/x")
    assert config_path().read_bytes() == before
    set_value("ledger.lease_seconds", "120")
    assert yaml.safe_load(config_path().read_text())["ledger"] == {"lease_seconds": 120}


# -- one error per cause -------------------------------------------------------------------------
def _url_with(password: str | None = None, port: int | None = None, dbname: str | None = None) -> str:
    """The test server's URL with one part changed."""
    url = urlsplit(postgres_dsn())
    user, _, secret = url.netloc.rpartition("@")[0].partition(":")
    netloc = f"{user}:{password or secret}@{url.hostname}:{port or url.port}"
    return urlunsplit((url.scheme, netloc, f"/{dbname}" if dbname else url.path, url.query, ""))


@pytest.mark.parametrize("cause, url, kind, fix", [
    ("wrong password", lambda: _url_with(password="not-the-password"), "auth", "fix the user or password"),
    ("server down", lambda: _url_with(port=free_port()), "unreachable", "start PostgreSQL"),
    ("no such database", lambda: _url_with(dbname="offload_no_such_db"), "no-database", "create it"),
    ("not a URL", lambda: "postgresql://u@h:notaport/x?bogus=1", "config", "not a valid PostgreSQL URL"),
])
def test_each_failure_cause_is_its_own_kind_with_a_fix_and_no_password(cause, url, kind, fix):
    ledger = PostgresLedger(url())
    try:
        with pytest.raises(LedgerError) as err:
            ledger.persist_dispatch(row(), 1000.0)
    finally:
        ledger.close()
    message = str(err.value)
    assert err.value.kind == kind, message
    assert fix in message and "\n" not in message
    assert "not-the-password" not in message and ":offload@" not in message


def test_an_unreachable_server_costs_durability_only_with_one_log_line(monkeypatch, caplog):
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", _url_with(port=free_port()))
    caplog.set_level(logging.DEBUG, logger="offload.engine")
    ad._reset_for_tests()
    from tests.chaos.support import drain_queue
    from tools.process_registry import process_registry

    drain_queue()
    handles = [ad.dispatch_async_delegation(goal=f"g{i}", context=None, toolsets=None, role="leaf", model="m",
                                            session_key="s", runner=lambda i=i: {"status": "completed",
                                                                                 "summary": f"done {i}"})
               for i in range(3)]
    events = [process_registry.completion_queue.get(timeout=30) for _ in handles]

    assert sorted(e["summary"] for e in events) == ["done 0", "done 1", "done 2"]  # delivered in memory
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name == "offload.engine"]
    assert len(errors) == 1, errors
    assert "is unreachable" in errors[0] and "start PostgreSQL" in errors[0]
    ad._reset_for_tests()
