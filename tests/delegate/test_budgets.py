"""Token budgets of subagents (issue 29 item 6): the spend store per session and UTC day, the
budget a call's children share, the agent stopping before its next model call, the child's
result entry, and delegate_task refusing a session over its budget. End to end (``offload
run``): tests/e2e/test_child_safety_e2e.py."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from offload.agent.core import AIAgent
from offload.agent.llm import AssistantTurn
from offload.config import ConfigError, set_value
from offload.subagents.budget import DelegationBudget, SpendStore, over_budget, reported_tokens
from offload.subagents.child import run_single_child

pytestmark = pytest.mark.timeout(60)
DAY_S = 86_400.0


class Clock:
    def __init__(self, now: float = 1_780_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedLLM:
    def __init__(self, *turns: AssistantTurn) -> None:
        self.turns = list(turns)

    def stream_turn(self, messages, tools, **callbacks: Any) -> AssistantTurn:  # on_activity, on_text, ...
        return self.turns.pop(0)


def usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": tokens - 10, "completion_tokens": 10, "total_tokens": tokens}


def test_only_reported_tokens_count() -> None:
    assert reported_tokens(usage(120)) == 120
    assert reported_tokens(None) == 0 and reported_tokens({"prompt_tokens": None, "completion_tokens": True}) == 0


def test_the_store_counts_per_session_and_per_utc_day(tmp_path: Path) -> None:
    clock = Clock()
    store = SpendStore(tmp_path / "state.db", clock)
    assert store.totals("s1") == (0, 0)  # reading creates nothing
    assert not (tmp_path / "state.db").exists()
    store.add("s1", 300)
    store.add("s2", 50)
    store.add("s1", 0)
    assert store.totals("s1") == (300, 350) and store.totals("s2") == (50, 350)
    clock.now += DAY_S
    store.add("s1", 20)
    assert store.totals("s1") == (320, 20)  # the session keeps its total, the day starts again


def test_delegate_task_refuses_a_session_or_a_day_over_budget(tmp_path: Path) -> None:
    store = SpendStore(tmp_path / "state.db", Clock())
    assert over_budget(1000, 1000, store, "s1") is None
    store.add("s1", 600)
    store.add("s2", 500)
    refusal = over_budget(600, None, store, "s1")
    assert refusal and "600 tokens" in refusal and "delegation.max_tokens_per_session=600" in refusal
    assert over_budget(601, None, store, "s1") is None
    refusal = over_budget(None, 1100, store, "s3")
    assert refusal and "1100 tokens today" in refusal and "delegation.max_tokens_per_day=1100" in refusal
    assert over_budget(None, None, store, "s1") is None


def test_the_budget_is_shared_and_charges_the_store(tmp_path: Path) -> None:
    store = SpendStore(tmp_path / "state.db", Clock())
    budget = DelegationBudget(100, store, "s1")
    budget.charge(usage(60))
    assert budget.exhausted() is None
    budget.charge(usage(40))
    notice = budget.exhausted()
    assert notice and "used 100 tokens of delegation.max_tokens_per_delegation=100" in notice
    assert store.totals("s1") == (100, 100)
    assert DelegationBudget(None, None, "s1").exhausted() is None


def child_agent(tmp_path: Path, budget: DelegationBudget, *turns: AssistantTurn) -> AIAgent:
    agent = AIAgent(model="m", base_url="http://127.0.0.1:9/v1", api_key="", toolsets=["file"], workspace=tmp_path,
                    llm=ScriptedLLM(*turns))
    agent.token_budget = budget
    return agent


def test_a_child_stops_before_its_next_model_call_with_what_it_had(tmp_path: Path) -> None:
    listing = {"id": "c1", "name": "list_files", "arguments_json": "{}"}
    budget = DelegationBudget(100, None, "s1")
    agent = child_agent(tmp_path, budget, AssistantTurn("Found part one.", [listing], "tool_calls", usage(80)),
                        AssistantTurn("Found part two.", [listing], "tool_calls", usage(80)),
                        AssistantTurn("never asked", [], "stop", usage(80)))
    entry = run_single_child(0, "count", child=agent)
    assert (entry["status"], entry["exit_reason"], entry["summary"]) == ("interrupted", "token_budget", "Found part two.")
    assert entry["api_calls"] == 2 and entry["tokens"] == {"input": 140, "output": 20}
    assert "delegation.max_tokens_per_delegation=100" in entry["error"]
    assert budget.used == 160


def test_a_sibling_stops_at_once_when_the_call_budget_is_spent(tmp_path: Path) -> None:
    budget = DelegationBudget(100, None, "s1")
    budget.charge(usage(100))
    entry = run_single_child(1, "count", child=child_agent(tmp_path, budget))
    assert (entry["status"], entry["api_calls"]) == ("interrupted", 0)
    assert entry["summary"].startswith("Stopped at the token budget after 0 model call(s)")


@pytest.mark.parametrize("key", ["max_tokens_per_delegation", "max_tokens_per_session", "max_tokens_per_day"])
def test_the_budgets_are_validated_config_keys(key: str) -> None:
    with pytest.raises(ConfigError, match=f"delegation.{key}.*greater than or equal to 1"):
        set_value(f"delegation.{key}", "0")
    assert set_value(f"delegation.{key}", "5000")[0] == 5000
    assert set_value(f"delegation.{key}", "null")[0] is None
