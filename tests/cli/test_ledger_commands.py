"""offload agents / inbox: what another process sees in the ledger, recovery, --show and --ack."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from offload.cli.app import app
from tests.engine.conftest import clean_engine  # noqa: F401 - fixture
from tools.async_delegation_delivery import current_ledger
from offload.ledger import DispatchRow

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_unit_whose_owner_died_is_listed_recovered_shown_and_acknowledged():
    now = time.time()
    ledger = current_ledger()
    task = {"goal": "2 parallel subagents", "goals": ["alpha", "beta"], "is_batch": True, "group": "g"}
    ledger.persist_dispatch(DispatchRow("deleg_dead", "sess_x", now - 5, task, parent_session_id="sess_x",
                                        owner_pid=dead_pid()), now)
    ledger.record_unit_child("deleg_dead", {"task_index": 0, "status": "completed", "summary": "alpha done"}, now)

    agents = invoke("agents")
    assert "deleg_dead  running" in agents and "(dead: `offload inbox` recovers it)" in agents
    assert "children done 1/2" in agents and "#1 ✓ completed  alpha" in agents and "#2 … running  beta" in agents
    assert "session sess_x" in agents and "group g" in agents

    inbox = invoke("inbox")
    assert "recovered 1 delegation(s)" in inbox
    assert "deleg_dead  unknown" in inbox and "pending (attempts 0)" in inbox
    shown = invoke("inbox", "--show", "deleg_dead")
    assert "alpha done" in shown and "status=unknown" in shown

    acked = invoke("inbox", "--ack", "deleg_dead")
    assert "acknowledged deleg_dead" in acked and "pending results: none" in acked
    assert "delivered (attempts 0)" in invoke("inbox", "--all")
    assert "running: none" in invoke("agents")
