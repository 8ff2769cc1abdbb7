"""The spend table (``offload.ledger.spend_table``) on every backend, and the caps read from it
(``offload.subagents.budget``) across processes: two ledger instances on one store stand for two
hosts on one PostgreSQL ledger (and two processes on one state.db), so a worker's spend counts
against the dispatcher's session and day caps, and the units of one split call share its
per-delegation budget wherever they run."""
from __future__ import annotations

import threading

import pytest

from offload.subagents.budget import DelegationBudget, SpendStore, budget_from_spec, call_budget, over_budget
from offload.subagents.config import DelegationConfig
from tests.ledger.test_contract import ledger, ledger_factory  # noqa: F401 - the per-backend fixtures

pytestmark = pytest.mark.timeout(60)
NOW = 1_780_000_000.0  # 2026-05-28 UTC
DAY = "2026-05-28"


def usage(tokens: int, cost_usd: float | None = None) -> dict:
    return {"prompt_tokens": tokens - 10, "completion_tokens": 10,
            **({"cost_usd": cost_usd} if cost_usd is not None else {})}


def caps(**keys) -> DelegationConfig:
    return DelegationConfig.model_validate(keys)


def test_a_charge_adds_to_its_day_session_and_call(ledger) -> None:  # noqa: F811
    assert ledger.spend_totals([("session_key", "s1"), ("day", DAY)]) == [(0, 0.0, 0), (0, 0.0, 0)]
    ledger.add_spend(DAY, "s1", "call_a", (100, 0.25, 0), NOW)
    ledger.add_spend(DAY, "s1", "call_a", (50, 0.0, 1), NOW)
    ledger.add_spend(DAY, "s2", "call_b", (7, 0.5, 0), NOW)
    ledger.add_spend("2026-05-29", "s1", "", (3, 0.0, 0), NOW)
    assert ledger.spend_totals([("session_key", "s1"), ("day", DAY), ("call_id", "call_a"), ("call_id", "nope")]) == [
        (153, 0.25, 1), (157, 0.75, 1), (150, 0.25, 1), (0, 0.0, 0)]
    with pytest.raises(ValueError, match="spend scope 'owner'"):
        ledger.spend_totals([("owner", "x")])


def test_charges_from_many_threads_and_instances_are_all_counted(ledger_factory) -> None:  # noqa: F811
    instances = [ledger_factory() for _ in range(4)]
    start = threading.Barrier(len(instances))

    def charge(instance) -> None:
        start.wait(10)
        for _ in range(25):
            instance.add_spend(DAY, "s1", "call_a", (2, 0.01, 0), NOW)
    threads = [threading.Thread(target=charge, args=(i,)) for i in instances]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    [(tokens, cost, unknown)] = instances[0].spend_totals([("call_id", "call_a")])
    assert (tokens, round(cost, 6), unknown) == (200, 1.0, 0)


def test_a_workers_spend_counts_against_the_dispatchers_session_and_day_caps(ledger_factory) -> None:  # noqa: F811
    here, worker_host = ledger_factory(), ledger_factory()
    dispatcher = SpendStore(lambda: here, lambda: NOW)
    worker = SpendStore(lambda: worker_host, lambda: NOW)
    cfg = caps(max_tokens_per_delegation=10_000, max_tokens_per_session=300, max_tokens_per_day=1_000)
    sent = call_budget(cfg, dispatcher, "s1")
    ran = budget_from_spec(sent.to_spec(), worker)  # what the worker rebuilds from the queued row
    assert over_budget(cfg, dispatcher, "s1") is None
    ran.charge(usage(300))
    refusal = over_budget(cfg, dispatcher, "s1")
    assert refusal and "used 300 tokens" in refusal and "delegation.max_tokens_per_session=300" in refusal
    assert over_budget(cfg, dispatcher, "s2") is None
    SpendStore(lambda: worker_host, lambda: NOW).add("s2", 700)
    refusal = over_budget(caps(max_tokens_per_day=1_000), dispatcher, "s3")
    assert refusal and "1000 tokens today" in refusal


def test_the_units_of_one_split_call_share_its_budget_wherever_they_run(ledger_factory) -> None:  # noqa: F811
    hosts = [SpendStore(lambda i=ledger_factory(): i, lambda: NOW) for _ in range(2)]
    spec = call_budget(caps(max_tokens_per_delegation=100, max_cost_usd_per_delegation=1.0), hosts[0], "s1").to_spec()
    one, two = (budget_from_spec(spec, store) for store in hosts)
    assert one.call_id == two.call_id == spec["call_id"] and one.shared and two.shared
    one.charge(usage(60, 0.1))
    assert one.stop() is None and two.stop() is None
    two.charge(usage(40, 0.1))  # the call's total reaches the cap: every unit's children stop
    for budget in (one, two):
        reason, notice = budget.stop()
        assert reason == "token_budget" and "used 100 tokens of delegation.max_tokens_per_delegation=100" in notice
    other = budget_from_spec({**spec, "call_id": "call_other"}, hosts[1])
    assert other.stop() is None  # another call's budget is its own


def test_an_in_process_budget_keeps_its_count_without_reading_the_ledger(ledger) -> None:  # noqa: F811
    reads = []
    store = SpendStore(lambda: ledger, lambda: NOW)
    store.call_spend = lambda call_id: reads.append(call_id)  # type: ignore[method-assign]
    budget = DelegationBudget(100, store, "s1")
    budget.charge(usage(100))
    assert budget.stop()[0] == "token_budget" and reads == []
    assert store.spend("s1")[0].tokens == 100
