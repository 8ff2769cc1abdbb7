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
from offload.ledger import open_ledger
from offload.subagents.budget import (DelegationBudget, SpendStore, budget_from_spec, call_budget, over_budget,
                                      reported_tokens)
from offload.subagents.config import DelegationConfig
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


def spend_store(tmp_path: Path, clock: Clock) -> SpendStore:
    """A store over the SQLite ledger in ``tmp_path/state.db`` (the spend table's other backends:
    tests/ledger/test_spend_table.py)."""
    ledger = open_ledger(tmp_path / "state.db")
    return SpendStore(lambda: ledger, clock)


def usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": tokens - 10, "completion_tokens": 10, "total_tokens": tokens}


def test_only_reported_tokens_count() -> None:
    assert reported_tokens(usage(120)) == 120
    assert reported_tokens(None) == 0 and reported_tokens({"prompt_tokens": None, "completion_tokens": True}) == 0


def test_the_store_counts_per_session_and_per_utc_day(tmp_path: Path) -> None:
    clock = Clock()
    store = spend_store(tmp_path, clock)
    assert store.totals("s1") == (0, 0)  # reading creates nothing
    assert not (tmp_path / "state.db").exists()
    store.add("s1", 300)
    store.add("s2", 50)
    store.add("s1", 0)
    assert store.totals("s1") == (300, 350) and store.totals("s2") == (50, 350)
    clock.now += DAY_S
    store.add("s1", 20)
    assert store.totals("s1") == (320, 20)  # the session keeps its total, the day starts again


def caps(**keys: Any) -> DelegationConfig:
    return DelegationConfig.model_validate(keys)


def test_delegate_task_refuses_a_session_or_a_day_over_budget(tmp_path: Path) -> None:
    store = spend_store(tmp_path, Clock())
    assert over_budget(caps(max_tokens_per_session=1000, max_tokens_per_day=1000), store, "s1") is None
    store.add("s1", 600)
    store.add("s2", 500)
    refusal = over_budget(caps(max_tokens_per_session=600), store, "s1")
    assert refusal and "600 tokens" in refusal and "delegation.max_tokens_per_session=600" in refusal
    assert over_budget(caps(max_tokens_per_session=601), store, "s1") is None
    refusal = over_budget(caps(max_tokens_per_day=1100), store, "s3")
    assert refusal and "1100 tokens today" in refusal and "delegation.max_tokens_per_day=1100" in refusal
    assert over_budget(caps(), store, "s1") is None


def test_the_store_counts_reported_cost_and_calls_of_unknown_cost_apart(tmp_path: Path) -> None:
    store = spend_store(tmp_path, Clock())
    budget = DelegationBudget(None, store, "s1")
    budget.charge({**usage(100), "cost_usd": 0.25})
    budget.charge(usage(100))  # the provider reported no cost: unknown, not 0
    budget.charge({**usage(50), "cost_usd": 0.0})  # a free model: a known 0
    session, day = store.spend("s1")
    assert (session.tokens, session.cost_usd, session.cost_unknown_calls) == (250, 0.25, 1) and day == session


@pytest.mark.parametrize("cost_columns", [False, True])
def test_the_per_home_spend_table_of_earlier_versions_moves_into_the_ledger(tmp_path: Path, cost_columns) -> None:
    """Versions before the spend table kept subagent_spend in state.db (first without the cost
    columns); ledger migration 6 moves its rows, so today's and each session's totals go on."""
    import sqlite3

    with sqlite3.connect(tmp_path / "state.db") as db:
        extra = ", cost_usd REAL NOT NULL DEFAULT 0, cost_unknown_calls INTEGER NOT NULL DEFAULT 0" if cost_columns else ""
        db.execute("CREATE TABLE subagent_spend (day TEXT NOT NULL, session_key TEXT NOT NULL, "
                   f"tokens INTEGER NOT NULL{extra}, PRIMARY KEY (day, session_key))")
        db.execute("INSERT INTO subagent_spend (day, session_key, tokens) VALUES ('2026-05-28', 's1', 70)")
        if cost_columns:
            db.execute("UPDATE subagent_spend SET cost_usd = 0.25, cost_unknown_calls = 2")
    store = spend_store(tmp_path, Clock())
    store.add("s1", 30, 0.5)
    session, day = store.spend("s1")
    assert (session.tokens, session.cost_usd, session.cost_unknown_calls) == (
        (100, 0.75, 2) if cost_columns else (100, 0.5, 0)) and day == session
    with sqlite3.connect(tmp_path / "state.db") as db:
        assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'subagent_spend'").fetchall()


def test_the_cost_caps_refuse_a_session_or_a_day_over_them_or_of_unknown_cost(tmp_path: Path) -> None:
    store = spend_store(tmp_path, Clock())
    store.add("s1", 10, 1.5)
    assert over_budget(caps(max_cost_usd_per_session=2), store, "s1") is None
    refusal = over_budget(caps(max_cost_usd_per_session=1.5), store, "s1")
    assert refusal and "spent $1.5" in refusal and "delegation.max_cost_usd_per_session=$1.5" in refusal
    store.add("s2", 10, 1.0)
    refusal = over_budget(caps(max_cost_usd_per_day=2.5), store, "s3")
    assert refusal and "spent $2.5 today" in refusal and "renews at 00:00 UTC" in refusal
    store.add("s4", 10, 0.0, cost_unknown_calls=1)
    refusal = over_budget(caps(max_cost_usd_per_session=100), store, "s4")
    assert refusal and "1 model call(s) whose cost the provider did not report" in refusal
    assert "never taken as 0" in refusal and "delegation.max_cost_usd_per_session null" in refusal
    assert over_budget(caps(max_cost_usd_per_session=100), store, "s1") is None  # s4's unknown is not s1's
    assert "whose cost the provider did not report" in over_budget(caps(max_cost_usd_per_day=100), store, "s1")


def test_a_delegations_cost_budget_stops_its_children_and_an_unknown_cost_stops_them_too() -> None:
    budget = DelegationBudget(None, None, "s1", cost_cap=0.5)
    budget.charge({**usage(10), "cost_usd": 0.3})
    assert budget.stop() is None
    budget.charge({**usage(10), "cost_usd": 0.2})
    reason, notice = budget.stop()
    assert reason == "cost_budget" and "spent $0.5 of delegation.max_cost_usd_per_delegation=$0.5" in notice
    guarded = call_budget(caps(max_cost_usd_per_day=5), None, "s1")
    guarded.charge({**usage(10), "cost_usd": 0.1})
    assert guarded.stop() is None
    guarded.charge(usage(10))  # a call whose cost was not reported, under a day cap
    reason, notice = guarded.stop()
    assert reason == "cost_budget" and "delegation.max_cost_usd_per_day=5" in notice
    assert "did not report the cost of 1 of this delegation's model calls" in notice
    cut = call_budget(caps(max_cost_usd_per_day=5), None, "s1")
    cut.charge(None, interrupted=True)  # stopped by this side before the server sent usage: says nothing of it
    assert cut.stop() is None and cut.cost_unknown_calls == 0
    assert call_budget(caps(), None, "s1") is None
    assert DelegationBudget(None, None, "s1").stop() is None  # no cost cap: an unknown cost stops nothing


def test_a_budget_travels_whole_in_a_queued_row(tmp_path: Path) -> None:
    store = spend_store(tmp_path, Clock())
    sent = call_budget(caps(max_tokens_per_delegation=900, max_cost_usd_per_delegation=0.75,
                            max_cost_usd_per_session=3), store, "s1")
    got = budget_from_spec(json.loads(json.dumps(sent.to_spec())), store)
    assert (got.cap, got.cost_cap, got.cost_guard, got.session_key, got.store) == (
        900, 0.75, "delegation.max_cost_usd_per_delegation=0.75, delegation.max_cost_usd_per_session=3", "s1", store)
    assert budget_from_spec(None, store) is None and budget_from_spec({"counted": False}, store) is None


def test_the_budget_is_shared_and_charges_the_store(tmp_path: Path) -> None:
    store = spend_store(tmp_path, Clock())
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


@pytest.mark.parametrize("key", ["max_cost_usd_per_delegation", "max_cost_usd_per_session", "max_cost_usd_per_day"])
def test_the_cost_caps_are_validated_config_keys(key: str) -> None:
    for bad, why in (("0", "greater than 0"), ("-1", "greater than 0"), ("ten", "valid number")):
        with pytest.raises(ConfigError, match=f"delegation.{key}.*{why}"):
            set_value(f"delegation.{key}", bad)
    assert set_value(f"delegation.{key}", "2.5")[0] == 2.5
    assert set_value(f"delegation.{key}", "null")[0] is None


class BrokenLedger:
    """A ledger whose spend reads fail (the server went away), and whose writes too."""

    def spend_totals(self, *_: Any) -> None:
        from offload.ledger import LedgerError
        raise LedgerError("the PostgreSQL ledger at 127.0.0.1:9 is unreachable", kind="unreachable")

    add_spend = spend_totals


def test_spend_that_cannot_be_read_refuses_the_call_and_a_failed_charge_never_fails_the_child() -> None:
    store = SpendStore(lambda: BrokenLedger(), Clock())
    refusal = over_budget(caps(max_tokens_per_day=100), store, "s1")
    assert refusal and "could not be read from the ledger" in refusal and "127.0.0.1:9 is unreachable" in refusal
    shared = DelegationBudget(100, store, "s1", call_id="call_x", shared=True)
    shared.charge(usage(100))  # the write fails: logged, the child goes on
    assert shared.stop()[0] == "token_budget"  # the read fails: this process's own share still counts


def test_a_nested_calls_budget_charges_its_ancestors_and_stops_at_theirs(tmp_path: Path) -> None:
    """Issue 40: a grandchild's tokens count against the root delegation's cap, are booked once
    to the root session, and a worker rebuilding the nested unit keeps the chain."""
    store = spend_store(tmp_path, Clock())
    root = call_budget(caps(max_tokens_per_delegation=1000), store, "sess_root")
    nested = call_budget(caps(max_tokens_per_delegation=5000), store, "sess_root", parent=root)
    nested.charge(usage(600))
    assert nested.stop() is None and root.stop() is None
    nested.charge(usage(500))
    reason, notice = nested.stop()  # its own 5000 are far off; the root's 1000 are used up
    assert reason == "token_budget" and "used 1100 tokens of delegation.max_tokens_per_delegation=1000" in notice
    assert store.totals("sess_root") == (1100, 1100)  # once, under the root session
    rebuilt = budget_from_spec(nested.to_spec(), store)
    assert rebuilt.parent is not None and rebuilt.parent.call_id == root.call_id and rebuilt.session_key == "sess_root"
    assert rebuilt.stop() is None  # in another process, the root's own units spent nothing yet
    root.charge(usage(1000))
    assert rebuilt.stop()[0] == "token_budget"  # the root call's total is shared through the ledger


def test_a_session_or_day_cap_crossed_stops_running_children_too(tmp_path: Path) -> None:
    store = spend_store(tmp_path, Clock())
    budget = call_budget(caps(max_tokens_per_session=1000), store, "s1")
    budget.charge(usage(600))
    assert budget.stop() is None
    store.add("s1", 500, call_id="another call of the session")
    reason, notice = budget.stop()
    assert reason == "token_budget" and notice.startswith("stopped before its next model call")
    assert "used 1100 tokens, the budget delegation.max_tokens_per_session=1000" in notice
    rebuilt = budget_from_spec(budget.to_spec(), store)  # a worker's copy keeps the session cap
    assert rebuilt.stop()[0] == "token_budget"
