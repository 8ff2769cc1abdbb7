"""A damaged, locked or read-only ``$HERMES_HOME`` is one line on stderr with the fix, exit 2,
and listing still works on a read-only home.

Read-only is real here: the command runs in its own mount namespace where the home is bound
read-only (``unshare -m``, as root — chmod cannot stop root), or under chmod when the tests do
not run as root.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from offload.agent.session_store import SessionStore
from offload.ledger import DispatchRow
from tests.e2e.conftest import cli_env, one_line
from tests.e2e.conftest import offload as run_offload
from tools.async_delegation_delivery import current_ledger
from offload.home import config_path, get_hermes_home, state_db_path

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def offload(*args: str, read_only: bool = False) -> subprocess.CompletedProcess[str]:
    if not read_only:
        return run_offload(*args)
    return subprocess.run(_read_only([sys.executable, "-m", "offload", *args]), capture_output=True, text=True,
                          env=cli_env(), timeout=80, stdin=subprocess.DEVNULL)


def _read_only(command: list[str]) -> list[str]:
    home = str(get_hermes_home())
    if os.geteuid() != 0:
        for path in get_hermes_home().iterdir():
            path.chmod(0o400)
        get_hermes_home().chmod(0o500)
        return command
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("as root, a read-only home needs `unshare -m` (util-linux) with CAP_SYS_ADMIN")
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, "sh", home, *command]


@pytest.fixture(autouse=True)
def _writable_again():
    yield
    home = get_hermes_home()
    if home.exists() and os.geteuid() != 0:
        home.chmod(0o700)



@pytest.mark.parametrize("args", [("agents",), ("inbox",), ("sessions",), ("run", "hello"), ("stop", "deleg_x")])
def test_a_damaged_state_db_is_one_line_with_the_same_fix_everywhere(args):
    state_db_path().write_bytes(b"this is not a database" * 100)
    done = offload(*args)
    assert done.returncode == 2, done
    line = one_line(done.stderr)
    assert "state.db is damaged (not a readable SQLite database" in line
    assert f"mv {state_db_path()} {state_db_path()}.corrupt" in line  # one advice for both stores
    assert state_db_path().read_bytes() == b"this is not a database" * 100  # never deleted for the user


@pytest.mark.parametrize("args", [("agents",), ("sessions",)])  # the ledger, then the session store, meets it
def test_a_locked_state_db_is_not_called_damage(args):
    SessionStore().close()  # create the file, in WAL mode as in real use
    holder = sqlite3.connect(state_db_path(), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # e.g. an sqlite3 shell left in a transaction
    try:
        done = offload(*args)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 2, done
    line = one_line(done.stderr)
    assert "is locked by another process" in line and "not damaged" in line
    assert "mv " not in line and "corrupt" not in line


def _seed_rows() -> tuple[str, str]:
    """A running and a finished row in a real home: the session store puts state.db in WAL mode."""
    with SessionStore() as store:
        store.create_session("sess_ro", model="m")
    now = time.time()
    ledger = current_ledger()
    rows = [DispatchRow(did, "sess_ro", now - 5, {"goal": goal}, parent_session_id="sess_ro", owner_pid=os.getpid())
            for did, goal in (("deleg_aaa111", "still going"), ("deleg_bbb222", "finished one"))]
    for row in rows:
        ledger.persist_dispatch(row, now)
    event = {"type": "async_delegation", "delegation_id": "deleg_bbb222", "status": "completed",
             "summary": "the answer", "goal": "finished one", "parent_session_id": "sess_ro"}
    ledger.persist_completion(rows[1], event, {"status": "completed"}, now)
    ledger.close()
    return "deleg_aaa111", "deleg_bbb222"


def test_listing_works_on_a_read_only_home_and_writes_say_why_they_cannot():
    running, pending = _seed_rows()
    config_path().write_text("model: m\n", encoding="utf-8")

    agents = offload("agents", read_only=True)
    assert agents.returncode == 0, agents
    assert f"{running}  running" in agents.stdout and f"{pending}  completed" in agents.stdout
    assert "read-only listing" in one_line(agents.stderr)

    inbox = offload("inbox", "--json", read_only=True)
    assert inbox.returncode == 0, inbox
    assert [row["id"] for row in json.loads(inbox.stdout)["pending"]] == [pending]

    shown = offload("inbox", "--show", "bbb", read_only=True)  # a unique prefix is enough
    assert shown.returncode == 0 and "the answer" in shown.stdout, shown

    ack = offload("inbox", "--ack", pending, read_only=True)
    assert ack.returncode == 2, ack
    assert ack.stderr.strip().splitlines()[-1].startswith("offload: cannot acknowledge: ")  # after the note

    config = offload("config", "set", "model", "other", read_only=True)
    assert config.returncode == 2, config
    assert "cannot write" in one_line(config.stderr)
    assert config_path().read_text(encoding="utf-8") == "model: m\n"


def test_sessions_lists_on_a_read_only_home_and_creates_no_home(tmp_path):
    with SessionStore() as store:
        store.create_session("sess_listed", model="m")
    listed = offload("sessions", read_only=True)
    assert listed.returncode == 0, listed
    assert "sess_listed" in listed.stdout
    missing = tmp_path / "never" / "made"
    for args in (("sessions",), ("sessions", "--json"), ("agents",), ("inbox", "--all")):
        done = subprocess.run([sys.executable, "-m", "offload", *args], capture_output=True, text=True, timeout=60,
                              env=cli_env(HERMES_HOME=str(missing)), stdin=subprocess.DEVNULL)
        # a mistyped HERMES_HOME is said to be one (issue 41), not listed as an empty home; none is made
        assert done.returncode == 2 and "is no such directory" in done.stderr and not missing.exists(), (args, done)
