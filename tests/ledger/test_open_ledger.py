"""``open_ledger(url)`` is the one place that names a backend: which URL opens which ledger,
and a clear error (naming the accepted forms, never a password) for anything else."""
from __future__ import annotations

from pathlib import Path

import pytest

from offload.ledger import DispatchRow, LedgerError, open_ledger, redact
from offload.ledger.memory import MemoryLedger
from offload.ledger.sqlite import SqliteLedger

ROW = DispatchRow("deleg_1", "session", 1.0, {"goal": "g"})


@pytest.mark.parametrize("spelling", ["path", "str", "url"])
def test_a_path_or_sqlite_url_opens_that_sqlite_file(tmp_path, spelling):
    db = tmp_path / "state.db"
    url = {"path": db, "str": str(db), "url": f"sqlite://{db}"}[spelling]

    ledger = open_ledger(url)

    assert isinstance(ledger, SqliteLedger)
    assert ledger.location == str(db)
    ledger.persist_dispatch(ROW, 1.0)
    assert db.exists()
    ledger.close()


def test_a_relative_sqlite_url_is_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert open_ledger("sqlite:ledger.db").location == "ledger.db"


def test_memory_urls_share_a_store_by_name_and_private_ones_do_not():
    first, second = open_ledger("memory://shared-by-name"), open_ledger("memory://shared-by-name")
    private_a, private_b = open_ledger("memory://"), open_ledger("memory://")
    assert all(isinstance(ledger, MemoryLedger) for ledger in (first, second, private_a, private_b))

    first.persist_dispatch(ROW, 1.0)
    private_a.persist_dispatch(ROW, 1.0)

    assert second.get("deleg_1") is not None
    assert private_b.get("deleg_1") is None and not private_b.exists()
    assert first.location == second.location == "memory://shared-by-name"


def test_an_unknown_scheme_is_a_config_error_naming_the_accepted_ones_without_the_password():
    with pytest.raises(LedgerError) as info:
        open_ledger("mysql://alice:s3cret@db.example:3306/offload")

    message = str(info.value)
    assert info.value.kind == "config"
    assert "'mysql'" in message and "sqlite://" in message and "memory://" in message
    assert "s3cret" not in message and "alice:***@db.example:3306" in message


@pytest.mark.parametrize("url", ["", "   ", "sqlite:", "sqlite://"])
def test_a_ledger_location_naming_no_file_is_a_config_error(url):
    with pytest.raises(LedgerError) as info:
        open_ledger(url)
    assert info.value.kind == "config"
    assert "sqlite" in str(info.value).lower()


def test_options_a_backend_does_not_take_are_refused(tmp_path):
    with pytest.raises(TypeError):
        open_ledger(tmp_path / "state.db", lease_s=30)


def test_redact_hides_only_the_password():
    assert redact("postgresql://bob:pw@host:5432/db") == "postgresql://bob:***@host:5432/db"
    assert redact("postgresql://bob@host/db") == "postgresql://bob@host/db"
    assert redact(str(Path("/srv/state.db"))) == "/srv/state.db"
