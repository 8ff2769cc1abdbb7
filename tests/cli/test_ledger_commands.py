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


def test_inbox_says_who_delivers_a_pending_result_and_why_one_was_dropped():
    import json

    now = time.time()
    ledger = current_ledger()
    for did in ("deleg_free", "deleg_held", "deleg_gone"):
        row = DispatchRow(did, "sess_y", now - 5, {"goal": did}, parent_session_id="sess_y", owner_pid=dead_pid())
        ledger.persist_dispatch(row, now - 5)
        ledger.persist_completion(row, {"type": "async_delegation", "delegation_id": did, "status": "completed"},
                                  {"status": "completed"}, now - 1)
    ledger.claim_delivery("deleg_held", "gateway:1:abc", now, 300.0, holder=(4242, None))
    ledger.drop_delivery("deleg_gone", None, now, "chat 7 cannot be reached: 403 Forbidden")

    inbox = invoke("inbox", "--all")
    assert "deleg_free" in inbox and "delivered by a running chat, run or gateway of its session, else " \
                                     "`offload chat --resume sess_y`" in inbox
    assert "being delivered by gateway (process 4242) since" in inbox
    assert "dropped: chat 7 cannot be reached: 403 Forbidden" in inbox
    data = json.loads(invoke("inbox", "--all", "--json"))
    held = next(r for r in data["pending"] if r["id"] == "deleg_held")
    assert held["claimed_by"]["consumer"] == "gateway" and held["claimed_by"]["pid"] == 4242
    gone = next(r for r in data["settled"] if r["id"] == "deleg_gone")
    assert gone["drop_reason"] == "chat 7 cannot be reached: 403 Forbidden" and gone["claimed_by"] is None
