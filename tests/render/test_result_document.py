"""The result document (``offload.views.result``): one pure definition from an event or a ledger row."""
from __future__ import annotations

import json

from offload.ledger import LedgerRow
from offload.views.result import SCHEMA, from_event, from_row, run_document

KEYS = ["schema", "id", "session", "label", "state", "children", "group", "text", "error", "dispatched_at",
        "completed_at", "delivery_state", "delivery_attempts", "delivered_at", "stop_reason", "stall_quiet_s", "resumed"]
CHILD_KEYS = ["task", "goal", "state", "summary", "error", "duration_s", "api_calls", "tokens", "cost_usd",
              "truncated", "exit_reason", "tool_trace", "tool_trace_dropped", "resumed"]


def _stopped_fan_out(**over):
    evt = {"type": "async_delegation", "delegation_id": "deleg_1", "status": "completed", "is_batch": True,
           "goal": "2 parallel subagents: a; b", "goals": ["a", "b"], "parent_session_id": "sess_1",
           "session_key": "agent:main", "dispatched_at": 100.0, "completed_at": 130.0,
           "results": [{"task_index": 0, "status": "completed", "summary": "a done", "duration_seconds": 1.5,
                        "api_calls": 2, "tokens": {"input": 10, "output": 3}, "cost_usd": 0.01,
                        "exit_reason": "max_iterations", "truncated": True,
                        "tool_trace": [{"tool": "read_file", "args": 'path="a.py"', "outcome": "ok", "seconds": 0.25},
                                       {"tool": "run_command", "args": 'command="pytest"', "outcome": "error",
                                        "seconds": 3.5}], "tool_trace_dropped": 4, "resumed": None},
                       {"task_index": 1, "status": "interrupted", "summary": None, "error": "stopped"}]}
    evt.update(over)
    return evt


def test_an_event_becomes_the_document_with_every_key_and_todays_words():
    doc = from_event(_stopped_fan_out()).to_json()
    assert list(doc) == KEYS and doc["schema"] == SCHEMA == "offload.result/1"
    assert (doc["id"], doc["session"], doc["state"]) == ("deleg_1", "sess_1", "partial")  # stored "completed"
    first, second = doc["children"]
    assert list(first) == CHILD_KEYS
    assert first == {"task": 1, "goal": "a", "state": "completed", "summary": "a done", "error": None,
                     "duration_s": 1.5, "api_calls": 2, "tokens": {"input": 10, "output": 3, "unknown": None}, "cost_usd": 0.01,
                     "truncated": True, "exit_reason": "max_iterations",
                     "tool_trace": [{"tool": "read_file", "args": 'path="a.py"', "outcome": "ok", "seconds": 0.25},
                                    {"tool": "run_command", "args": 'command="pytest"', "outcome": "error",
                                     "seconds": 3.5}], "tool_trace_dropped": 4, "resumed": None}
    assert (second["tool_trace"], second["tool_trace_dropped"]) == (None, 0)  # none recorded (an older result)
    assert (second["task"], second["state"], second["error"], second["truncated"]) == (2, "interrupted", "stopped", False)
    assert doc["text"].startswith("[ASYNC DELEGATION BATCH COMPLETE — deleg_1]")
    assert "Outcome: partial — 1 of 2 tasks completed (1 truncated: may be incomplete), 1 interrupted" in doc["text"]
    assert doc["delivery_state"] is None  # an event alone does not know its delivery
    assert json.loads(json.dumps(doc)) == doc


def test_a_single_task_event_carries_its_one_child_at_the_top_level():
    evt = {"type": "async_delegation", "delegation_id": "deleg_2", "status": "error", "goal": "compute",
           "summary": None, "error": "RuntimeError: x", "api_calls": 0, "duration_seconds": 0.2, "session_key": ""}
    doc = from_event(evt).to_json()
    assert doc["state"] == "error" and doc["session"] is None and doc["label"] == "compute"
    assert doc["children"] == [{"task": 1, "goal": "compute", "state": "error", "summary": None,
                                "error": "RuntimeError: x", "duration_s": 0.2, "api_calls": 0, "tokens": None,
                                "cost_usd": None, "truncated": False, "exit_reason": None, "tool_trace": None,
                                "tool_trace_dropped": 0, "resumed": None}]


def test_a_running_row_lists_the_children_recorded_so_far_and_no_text():
    row = LedgerRow("deleg_3", "agent:main", "running", 100.0, parent_session_id="sess_3",
                    task={"is_batch": True, "goals": ["x", "y", "z"], "task_indexes": [1, 2], "group": "g"},
                    result={"results": [{"task_index": 2, "status": "failed", "error": "HTTP 500"}], "partial": True})
    doc = from_row(row).to_json()
    assert (doc["state"], doc["label"], doc["group"], doc["text"]) == ("running", "group g", "g", None)
    assert [(c["task"], c["goal"], c["state"]) for c in doc["children"]] == [(2, "y", "running"), (3, "z", "failed")]
    assert (doc["delivery_state"], doc["delivery_attempts"]) == ("pending", 0)


def test_a_finished_row_reads_its_event_and_its_delivery():
    row = LedgerRow("deleg_1", "agent:main", "completed", 100.0, completed_at=130.0, parent_session_id="sess_1",
                    task={"is_batch": True, "goals": ["a", "b"]}, event=_stopped_fan_out(),
                    delivery_state="delivered", delivery_attempts=1, delivered_at=131.0)
    doc = from_row(row, render=lambda evt: "as the agent read it").to_json()
    assert (doc["state"], doc["text"], doc["delivery_state"], doc["delivered_at"]) == (
        "partial", "as the agent read it", "delivered", 131.0)
    assert [c["state"] for c in doc["children"]] == ["completed", "interrupted"]


def test_the_run_document_wraps_answers_and_documents():
    doc = run_document("sess_1", [{"text": "hi", "exit_reason": "completed", "error": None, "in_reply_to": None}],
                       [from_event(_stopped_fan_out())], 0)
    assert doc["schema"] == "offload.run/1" and doc["exit_code"] == 0
    assert doc["delegations"][0]["schema"] == "offload.result/1" and doc["answers"][0]["text"] == "hi"
