"""``offload sessions``, unique id prefixes, and the ``--json`` listings scripts rely on."""
from __future__ import annotations

import json
import os
import re
import time

import pytest

from offload.ledger import DispatchRow
from offload.testing.model_server import text_reply
from tests.e2e.conftest import offload
from tools.async_delegation_delivery import current_ledger

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]



def test_sessions_are_listed_and_resumed_by_a_unique_prefix(model_server, write_config):
    write_config(model_server(text_reply("Hello.")))
    ids = []
    for _ in range(2):
        done = offload("run", "hi")
        assert done.returncode == 0, done
        ids.append(re.search(r"session (sess_[0-9a-f]+)", done.stderr).group(1))  # the transcript: stderr

    listed = offload("sessions")
    assert listed.returncode == 0, listed
    assert all(sid in listed.stdout for sid in ids) and "3 message(s)" in listed.stdout  # system, user, answer
    as_json = json.loads(offload("sessions", "--json").stdout)
    assert [s["id"] for s in as_json] == ids[::-1]  # most recent first
    assert {s["messages"] for s in as_json} == {3} and as_json[0]["pending_results"] == 0

    short = ids[0][len("sess_"):][:8]
    resumed = offload("run", "--resume", short, "again")
    assert resumed.returncode == 0, resumed
    assert f"session {ids[0]}" in resumed.stderr

    ambiguous = offload("run", "--resume", "sess_", "again")
    assert ambiguous.returncode == 2, ambiguous
    assert "'sess_' matches 2 sessions" in ambiguous.stderr and ids[1] in ambiguous.stderr
    unknown = offload("chat", "--resume", "sess_zzz")
    assert unknown.returncode == 2 and "no session 'sess_zzz'; `offload sessions` lists them" in unknown.stderr


def test_agents_json_has_the_documented_keys_and_per_child_status():
    now = time.time()
    ledger = current_ledger()
    task = {"goal": "2 parallel subagents", "goals": ["alpha", "beta"], "is_batch": True}
    ledger.persist_dispatch(DispatchRow("deleg_abc123", "sess_j", now - 3, task, parent_session_id="sess_j",
                                        owner_pid=os.getpid()), now)
    ledger.record_unit_child("deleg_abc123", {"task_index": 1, "status": "completed", "summary": "b",
                                              "duration_seconds": 0.03}, now)
    ledger.close()

    done = offload("agents", "--json")
    assert done.returncode == 0, done
    data = json.loads(done.stdout)
    assert set(data) == {"running", "queued", "pending", "recent"} and data["queued"] == []
    [row] = data["running"]
    assert {"id", "session", "label", "state", "dispatched_at", "completed_at", "delivery_state",
            "delivery_attempts", "owner_pid", "owner", "children"} <= set(row)
    assert (row["id"], row["session"], row["state"], row["owner"]) == ("deleg_abc123", "sess_j", "running", "running")
    idle = {"api_calls": None, "current_tool": None, "seconds_since_activity": None,  # nothing published
            "last_text": None, "last_tool": None, "resumed": None}  # neither resumed after a death
    assert [child.pop("truncated") for child in row["children"]] == [False, False]  # neither was cut off
    assert row["children"] == [
        {"task": 1, "goal": "alpha", "state": "running", "duration_s": None, **idle},  # offload.result/1's keys
        {"task": 2, "goal": "beta", "state": "completed", "duration_s": 0.03, **idle},  # done: no idle clock
    ]
    assert row["activity_age_s"] is None and row["stall_clock_s"] is None and row["owner_host"] is None
    text = offload("agents").stdout
    assert "owner" in text and "(alive)" in text and "#2 ✓ completed 0.0 s  beta" in text
