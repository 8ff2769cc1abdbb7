"""A broken config.yaml never makes the history look empty (issue 26, item 2): every command that
reads the ledger fails with the same one-line config error as ``offload run``, exit 2 — never
"none", never "no delegation 'ID'"; and a PostgreSQL ledger that cannot be reached is named, not
blamed on state.db (item 13)."""
from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import offload, one_line
from offload.home import config_path

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

DELEGATION_ID = re.compile(r"\bdeleg_[0-9a-f]+(?:-\d+)?\b")


def _history() -> str:
    """One finished demo fan-out in this HERMES_HOME; the id of one of its delegations."""
    done = offload("run", "--demo-model", "compare the formats")
    assert done.returncode == 0, done
    listed = offload("inbox", "--all")
    assert listed.returncode == 0, listed
    return DELEGATION_ID.search(listed.stdout).group(0)


@pytest.mark.parametrize("broken", ["model: [\n", "ledger: 5\n", "model: m\ndelegation: {max_concurrent_children: 0}\n"])
def test_every_ledger_reader_says_what_run_says(broken):
    delegation_id = _history()
    config_path().write_text(broken, encoding="utf-8")
    expected = one_line(offload("run", "hello").stderr)
    for command in (["agents"], ["agents", "--json"], ["inbox", "--all"], ["inbox", "--show", delegation_id],
                    ["stop", delegation_id], ["sessions"], ["dashboard", "--port", "0"]):
        done = offload(*command)
        assert done.returncode == 2, (command, done)
        assert one_line(done.stderr) == expected, command
        assert "none" not in done.stdout and "no delegation" not in done.stderr, (command, done)


def test_an_unreachable_postgresql_ledger_is_named_not_state_db():
    done = offload("agents", OFFLOAD_LEDGER_URL="postgresql://offload:hunter2@127.0.0.1:1/offload")
    assert done.returncode == 2, done
    line = one_line(done.stderr)
    assert "postgresql://offload@127.0.0.1:1/offload is unreachable" in line, line
    assert "state.db" not in line and "hunter2" not in line
    assert "kept in memory" not in line  # a listing keeps no results: only an owner's writes wait for the server
