"""delegate_task parity (#14): generated schema, errors as JSON, placeholder goals refused."""
from __future__ import annotations

import json

import pytest

import tools.delegate_tool as dt
from tests.delegate.fakes import FakeParent
from tests.engine.conftest import clean_engine  # noqa: F401 - fixture
from tools import async_delegation as ad
from offload.subagents.args import DELEGATE_TASK_SCHEMA, DelegateArgs
from offload.subagents.goals import goal_problem

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


def call(**kw) -> dict:
    kw.setdefault("parent_agent", FakeParent())
    return json.loads(dt.delegate_task(**kw))


# -- 1. schema ---------------------------------------------------------------------------------

def test_schema_is_a_full_function_spec_generated_from_the_argument_model():
    assert set(DELEGATE_TASK_SCHEMA) == {"name", "description", "parameters"}
    assert DELEGATE_TASK_SCHEMA["name"] == "delegate_task" and "background" in DELEGATE_TASK_SCHEMA["description"]
    params = DELEGATE_TASK_SCHEMA["parameters"]
    advertised = set(params["properties"])
    assert advertised == {"goal", "context", "tasks", "background", "role"}
    assert advertised < set(DelegateArgs.model_fields)  # every advertised name is validated by the model
    assert params["properties"]["role"]["enum"] == ["leaf", "orchestrator"]
    task = params["properties"]["tasks"]["items"]
    assert set(task["properties"]) == {"goal", "context", "group"} and task["required"] == ["goal"]
    text = json.dumps(DELEGATE_TASK_SCHEMA)
    assert "$ref" not in text and "anyOf" not in text and "title" not in text


def test_operator_knobs_are_accepted_but_not_advertised():
    assert {"toolsets", "max_iterations"} & set(DELEGATE_TASK_SCHEMA["parameters"]["properties"]) == set()
    args = DelegateArgs(goal="write the docs", toolsets=["file"], max_iterations=3)
    assert (args.toolsets, args.max_iterations) == (["file"], 3)


def test_the_registered_tool_advertises_the_generated_spec():
    (tool,) = dt.TOOLS
    assert tool.schema()["function"] == DELEGATE_TASK_SCHEMA


# -- 2. errors as JSON -------------------------------------------------------------------------

@pytest.mark.parametrize("failure", [RuntimeError("provider registry offline"), KeyError("base_url"),
                                     OSError("keychain locked")])
def test_any_credential_failure_is_error_json_and_nothing_is_dispatched(monkeypatch, failure):
    def resolve(cfg, parent):
        raise failure
    monkeypatch.setattr(dt, "_resolve_delegation_credentials", resolve)
    parent = FakeParent()
    out = call(goal="write the docs", parent_agent=parent)
    assert out["status"] == "error" and type(failure).__name__ in out["error"]
    assert "delegation.model" in out["error"] and parent.built == [] and ad.active_count() == 0


def test_credentials_that_are_not_a_mapping_are_error_json(monkeypatch):
    monkeypatch.setattr(dt, "_resolve_delegation_credentials", lambda cfg, parent: None)
    out = call(goal="write the docs")
    assert out["status"] == "error" and "NoneType" in out["error"]


def test_missing_parent_says_parent_agent_plainly():
    out = json.loads(dt.delegate_task(goal="write the docs"))
    assert out["status"] == "error" and "parent agent" in out["error"]


def test_spawn_depth_says_depth_limit_plainly():
    out = call(goal="write the docs", parent_agent=FakeParent(depth=1))
    assert out["status"] == "error" and "depth limit" in out["error"] and "max_spawn_depth=1" in out["error"]


def test_an_unexpected_failure_inside_the_tool_is_error_json(monkeypatch):
    from offload.subagents import dispatch

    def explode(batch, note=None):
        raise ZeroDivisionError("boom")
    monkeypatch.setattr(dispatch, "run_sync", explode)
    out = call(goal="write the docs", background=False)
    assert out["status"] == "error" and "ZeroDivisionError: boom" in out["error"]


# -- 3. placeholder goals ----------------------------------------------------------------------

@pytest.mark.parametrize("goal", ["TODO", "todo.", "TBD", "FIXME", "...", "<feature_name>",
                                  "Implement <feature_name> end to end", "Add <FEATURE_NAME> support",
                                  "{{ task }}", "do {task_goal} now", "[TODO]", "3", "#12", "task 2", "Goal 4.",
                                  "fix", "ls", "a"])
def test_placeholder_goals_are_refused(goal):
    assert goal_problem(goal) is not None


@pytest.mark.parametrize("goal", ["bg task", "beta", "Remove the TODO comments in src/", "fix the <div> layout",
                                  "Support Optional<T> in the parser", "Fix bug #12 in the pager",
                                  "task 2: port the pager to rust", "write {} to the file"])
def test_real_goals_are_not_refused(goal):
    assert goal_problem(goal) is None


def test_a_placeholder_single_goal_is_refused_before_anything_is_built():
    parent = FakeParent()
    out = call(goal="<feature_name>", parent_agent=parent)
    assert out["status"] == "error" and "goal '<feature_name>'" in out["error"]
    assert "nothing was dispatched" in out["error"] and parent.built == [] and ad.active_count() == 0


def test_a_batch_names_every_placeholder_and_dispatches_none_of_its_tasks():
    parent = FakeParent()
    out = call(tasks=[{"goal": "review the pager module"}, {"goal": "TODO"}, {"goal": "7"}], parent_agent=parent)
    assert out["status"] == "error"
    assert "tasks[1].goal 'TODO'" in out["error"] and "tasks[2].goal '7'" in out["error"]
    assert "tasks[0]" not in out["error"] and parent.built == [] and ad.active_count() == 0


def test_placeholder_goals_are_refused_in_sync_mode_too():
    parent = FakeParent()
    out = call(tasks=[{"goal": "task 1"}], background=False, parent_agent=parent)
    assert out["status"] == "error" and parent.built == []
