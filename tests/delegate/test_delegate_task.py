"""delegate_task: argument validation, config, credentials, sync and background modes."""
from __future__ import annotations

import json
import threading

import pytest

import tools.delegate_tool as dt
from tests.delegate.fakes import FakeParent
from tests.engine.conftest import clean_engine, wait_event  # noqa: F401 - fixture
from tools import async_delegation as ad

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


def call(**kw) -> dict:
    kw.setdefault("parent_agent", FakeParent())
    return json.loads(dt.delegate_task(**kw))


@pytest.mark.parametrize("kwargs,needle", [
    ({}, "exactly one of `goal`"),
    ({"goal": "write the docs", "tasks": [{"goal": "test the code"}]}, "exactly one of `goal`"),
    ({"tasks": []}, "`tasks` is empty"),
    ({"goal": "   "}, "goal is empty"),
    ({"goal": "write the docs", "toolsets": ["shell"]}, "unknown toolset(s) ['shell']"),
    ({"tasks": [{"goal": "write the docs", "colour": "red"}]}, "tasks.0.colour: unexpected argument"),
    ({"goal": "write the docs", "bogus": 1}, "bogus: unexpected argument"),
    ({"goal": "write the docs", "max_iterations": 0}, "max_iterations"),
    ({"goal": 7}, "goal"),
])
def test_bad_arguments_come_back_as_error_json(kwargs, needle):
    out = call(**kwargs)
    assert out["status"] == "error"
    assert needle in out["error"]


def test_too_many_tasks_names_the_key(monkeypatch):
    monkeypatch.setattr(dt, "_load_config", lambda: {"max_concurrent_children": 2})
    out = call(tasks=[{"goal": f"task {i} of three"} for i in range(3)])
    assert out["status"] == "error" and "delegation.max_concurrent_children=2" in out["error"]


def test_bad_config_file_is_reported_not_raised(tmp_path, monkeypatch):
    from offload.home import config_path
    config_path().write_text("delegation:\n  max_concurrent_children: 0\n  colour: red\n")
    out = call(goal="write the docs")
    assert out["status"] == "error"
    assert "delegation.max_concurrent_children" in out["error"] and "delegation.colour: unknown key" in out["error"]


def test_broken_yaml_is_reported():
    from offload.home import config_path
    config_path().write_text("delegation: [unclosed\n")
    out = call(goal="write the docs")
    assert out["status"] == "error" and "not valid YAML" in out["error"]


def test_missing_parent_agent_is_an_error():
    assert "parent_agent" in json.loads(dt.delegate_task(goal="write the docs"))["error"]


def test_children_cannot_delegate_deeper_than_max_spawn_depth():
    out = call(goal="write the docs", parent_agent=FakeParent(depth=1))
    assert out["status"] == "error" and "max_spawn_depth=1" in out["error"]


def test_sync_mode_runs_children_in_parallel_and_returns_results():
    both_running = threading.Barrier(2, timeout=5)

    def behaviour(child):
        both_running.wait()  # deadlocks unless the two children really run at once
        return {"final_response": f"ok {child.goal}", "completed": True, "api_calls": 2}

    out = call(tasks=[{"goal": "task one"}, {"goal": "task two", "context": "ctx2"}], background=False,
               parent_agent=FakeParent(behaviour))
    assert out["mode"] == "sync"
    assert [(r["task_index"], r["status"], r["summary"]) for r in out["results"]] == [
        (0, "completed", "ok task one"), (1, "completed", "ok task two")]


def test_child_prompt_carries_its_context():
    parent = FakeParent()
    call(goal="do it", context="the facts", background=False, parent_agent=parent)
    assert parent.built[0].prompts == ["do it\n\nContext from the parent agent:\nthe facts"]


@pytest.mark.parametrize("out,status,exit_reason", [
    ({"final_response": "partial", "completed": False, "api_calls": 50}, "completed", "max_iterations"),
    ({"final_response": None, "interrupted": True, "exit_reason": "interrupted"}, "interrupted", "interrupted"),
    ({"final_response": None, "error": "HTTP 404: model 'x' does not exist", "exit_reason": "error"},
     "failed", "error"),
    ({"final_response": "(empty)", "completed": True}, "failed", "completed"),
])
def test_result_entry_classification(out, status, exit_reason):
    res = call(goal="write the docs", background=False, parent_agent=FakeParent(lambda child: out))
    (entry,) = res["results"]
    assert (entry["status"], entry["exit_reason"]) == (status, exit_reason)
    assert entry["truncated"] == (exit_reason == "max_iterations")


def test_a_child_that_raises_is_an_error_not_a_failure():
    def behaviour(child):
        if child.goal == "crash please":
            raise RuntimeError("kaput")
        return {"final_response": None, "error": "HTTP 500", "exit_reason": "error"}

    entries = call(tasks=[{"goal": "crash please"}, {"goal": "fail please"}], background=False,
                   parent_agent=FakeParent(behaviour))["results"]
    assert [(e["status"], e["error"]) for e in entries] == [("error", "RuntimeError: kaput"), ("failed", "HTTP 500")]


def test_long_summaries_are_capped_head_and_tail(monkeypatch):
    monkeypatch.setattr(dt, "_load_config", lambda: {"max_summary_chars": 200})
    text = "A" * 300 + "Z" * 300
    (entry,) = call(goal="write the docs", background=False,
                    parent_agent=FakeParent(lambda c: {"final_response": text, "completed": True}))["results"]
    assert entry["summary"].startswith("A" * 100) and entry["summary"].endswith("Z" * 100)
    assert "400 characters cut" in entry["summary"] and entry["summary_truncated"] is True


def test_background_single_task_rides_the_batch_path():
    gate = threading.Event()
    parent = FakeParent(lambda c: (gate.wait(10), {"final_response": "bg", "completed": True})[1])
    handle = call(goal="in the background", parent_agent=parent)
    assert handle["status"] == "dispatched" and handle["mode"] == "background"
    assert "END YOUR TURN" in handle["note"] and parent._active_children == []
    gate.set()
    evt = wait_event(handle["delegation_id"])
    assert evt["is_batch"] is True and evt["results"][0]["summary"] == "bg"
    assert evt["parent_session_id"] == "parent-sid" and evt["session_key"] == "parent-sid"
    assert ad.get_durable_delegation(handle["delegation_id"])["state"] == "completed"


def test_background_at_capacity_runs_synchronously_with_a_note_when_told_to(monkeypatch):
    monkeypatch.setattr(dt, "_load_config", lambda: {"max_concurrent_children": 1, "at_capacity": "inline"})
    gate = threading.Event()
    first = call(goal="hold the slot", parent_agent=FakeParent(lambda c: (gate.wait(10), {"final_response": "x",
                                                                                          "completed": True})[1]))
    second = call(goal="overflow")
    gate.set()
    assert first["status"] == "dispatched"
    assert second["mode"] == "sync" and "max_concurrent_children=1" in second["note"]
    assert second["results"][0]["summary"] == "done: overflow"


def test_no_async_delivery_runs_synchronously(monkeypatch):
    from offload.context import session_env
    monkeypatch.setattr(session_env, "async_delivery_supported", lambda: False)
    out = call(goal="write the docs")
    assert out["mode"] == "sync" and "not available in this session" in out["note"]


def test_independent_completions_split_units_that_share_one_slot(monkeypatch):
    monkeypatch.setattr(dt, "_load_config", lambda: {"independent_completions": True, "max_concurrent_children": 4})
    gates = {g: threading.Event() for g in ("task a", "task b", "task c")}
    parent = FakeParent(lambda c: (gates[c.goal].wait(10), {"final_response": c.goal, "completed": True})[1])
    handle = call(tasks=[{"goal": "task a", "group": "g1"}, {"goal": "task b"}, {"goal": "task c", "group": "g1"}],
                  parent_agent=parent)
    units = handle["units"]
    assert [(u["group"], u["task_indexes"]) for u in units] == [("g1", [0, 2]), (None, [1])]
    with ad._records_lock:
        slots = {ad._records[u["delegation_id"]]["slot_key"] for u in units}
    assert slots == {units[0]["delegation_id"]}
    gates["task b"].set()
    assert [r["summary"] for r in wait_event(units[1]["delegation_id"])["results"]] == ["task b"]
    gates["task a"].set()
    gates["task c"].set()
    evt = wait_event(units[0]["delegation_id"])
    assert evt["group"] == "g1" and [r["task_index"] for r in evt["results"]] == [0, 2]


def test_each_finished_child_is_recorded_before_the_unit_ends():
    release = threading.Event()

    def behaviour(child):
        if child.goal == "slow":
            release.wait(10)
        return {"final_response": child.goal, "completed": True}

    handle = call(tasks=[{"goal": "fast"}, {"goal": "slow"}], parent_agent=FakeParent(behaviour))
    did = handle["delegation_id"]
    row = None
    for _ in range(200):
        row = ad.get_durable_delegation(did)
        if row and row["result"]:
            break
        threading.Event().wait(0.02)
    release.set()
    assert row["state"] == "running"
    assert [r["summary"] for r in row["result"]["results"]] == ["fast"]
    wait_event(did)


def test_credentials_prefer_delegation_config_and_never_leak_the_parent_key(monkeypatch):
    from offload.subagents.config import DelegationConfig
    parent = FakeParent()
    inherited = dt._resolve_delegation_credentials(DelegationConfig(), parent)
    assert (inherited["model"], inherited["base_url"], inherited["api_key"]) == (
        "parent-model", parent.base_url, "parent-key")
    other = dt._resolve_delegation_credentials(DelegationConfig(model="m2", base_url="http://other/v1"), parent)
    assert (other["model"], other["base_url"], other["api_key"]) == ("m2", "http://other/v1", "")
    monkeypatch.setenv("SUB_KEY", "sk-sub")
    keyed = dt._resolve_delegation_credentials(DelegationConfig(api_key_env="SUB_KEY"), parent)
    assert keyed["api_key"] == "sk-sub"


def test_missing_api_key_env_is_reported():
    from offload.home import config_path
    config_path().write_text("delegation:\n  api_key_env: NOPE_NOT_SET\n")
    out = call(goal="write the docs")
    assert out["status"] == "error" and "NOPE_NOT_SET" in out["error"]


def test_progress_token_samples_every_child_and_an_unbuilt_one_as_none():
    from offload.subagents.children import progress_token
    parent = FakeParent()
    children = [parent.build_child(task_index=i, goal=str(i)) for i in range(2)] + [None]
    children[1].api_calls = 3
    token, in_tool = progress_token(children)()
    assert [t and t[0] for t in token] == [0, 3, None] and in_tool is False


def test_tool_entry_passes_the_calling_agent():
    from offload.toolsets.toolspec import ToolContext
    (tool,) = dt.TOOLS
    parent = FakeParent()
    out = json.loads(tool.handler({"goal": "write the docs", "background": False}, ToolContext(workspace=".", caller=parent)))
    assert out["results"][0]["summary"] == "done: write the docs"
    assert tool.schema()["function"]["name"] == "delegate_task"
