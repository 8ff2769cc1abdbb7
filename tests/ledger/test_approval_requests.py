"""The approvals side table and its API (offload.subagents.approvals) on every backend: a request
is listed until one decision settles it, a second decision is refused naming the first, a
waiting child sees the answer, its deadline (timed_out) or its interrupt; and the policy."""
from __future__ import annotations

import threading

import pytest

from offload.subagents.approvals import (
    ALLOW, ASK, DENY, ApprovalError, ApprovalPolicy, decide, get, pending, request, wait,
)
from offload.toolsets.command_risk import classify
from tests.ledger.test_contract import T0, ledger, ledger_factory, settled  # noqa: F401 - the per-backend fixtures

pytestmark = pytest.mark.timeout(60)


def _ask(ledger, session: str = "sess_a", timeout_s: float = 300.0, now: float | None = None,  # noqa: F811
         delegation_id: str = "deleg_1"):
    return request(ledger, command="rm -rf build", found=classify("rm -rf build", "."), session_key=session,
                   delegation_id=delegation_id, child=0, timeout_s=timeout_s, now=now)


def test_a_pruned_units_requests_go_with_it_and_a_kept_units_stay(ledger) -> None:  # noqa: F811
    settled(ledger, "deleg_old", T0 + 10)
    settled(ledger, "deleg_kept", T0 + 500)
    old, kept = _ask(ledger, delegation_id="deleg_old"), _ask(ledger, delegation_id="deleg_kept")
    decide(ledger, old["request_id"], True, "cli:alice")
    assert ledger.prune(T0 + 600, retention_s=200, max_settled=100) == 1
    assert get(ledger, old["request_id"]) is None
    assert get(ledger, kept["request_id"])["state"] == "pending"


def test_a_request_is_pending_until_one_decision_settles_it(ledger) -> None:  # noqa: F811
    first, other = _ask(ledger), _ask(ledger, session="sess_b")
    assert [r["request_id"] for r in pending(ledger)] == [first["request_id"], other["request_id"]]
    [mine] = pending(ledger, "sess_a")
    assert (mine["command"], mine["categories"], mine["delegation_id"], mine["child"]) == (
        "rm -rf build", ["destructive"], "deleg_1", 0)
    decided = decide(ledger, first["request_id"], True, "cli:alice", now=123.0)
    assert (decided["state"], decided["decided_by"], decided["decided_at"]) == ("allowed", "cli:alice", 123.0)
    assert [r["request_id"] for r in pending(ledger)] == [other["request_id"]]
    with pytest.raises(ApprovalError, match="already decided: allowed by cli:alice"):
        decide(ledger, first["request_id"], False, "cli:bob")
    with pytest.raises(ApprovalError, match="no approval request apr_nope"):
        decide(ledger, "apr_nope", True, "cli:bob")
    kinds = [(e.kind, e.child) for e in ledger.read_journal("deleg_1")]
    assert kinds == [("approval_request", 0), ("approval_request", 0), ("approval_decision", 0)]


def test_a_waiting_child_sees_an_answer_from_another_thread(ledger) -> None:  # noqa: F811
    row = _ask(ledger)
    waits = threading.Event()
    answerer = threading.Thread(target=lambda: (waits.wait(10), decide(ledger, row["request_id"], False, "dash")))
    answerer.start()
    decided = wait(ledger, row, threading.Event(), on_wait=waits.set)
    answerer.join(10)
    assert (decided["state"], decided["decided_by"]) == ("denied", "dash")


def test_a_request_nobody_answers_times_out_and_an_interrupt_withdraws_it(ledger) -> None:  # noqa: F811
    late = _ask(ledger, timeout_s=0.0)
    assert wait(ledger, late, threading.Event())["state"] == "timed_out"
    stopped = threading.Event()
    stopped.set()
    assert wait(ledger, _ask(ledger), stopped)["decided_by"] == "interrupt"
    assert pending(ledger) == [] and get(ledger, late["request_id"])["decided_by"] == "timeout"


@pytest.mark.parametrize("policy,categories,expected", [
    (ApprovalPolicy(), (), (ALLOW, None)),
    (ApprovalPolicy(), ("network",), (DENY, "network")),
    (ApprovalPolicy(ALLOW), ("network", "destructive"), (ALLOW, "network")),
    (ApprovalPolicy(ALLOW, {"destructive": ASK}), ("network", "destructive"), (ASK, "destructive")),
    (ApprovalPolicy(ASK, {"network": DENY}), ("destructive", "network"), (DENY, "network")),
    (ApprovalPolicy(DENY, {"package_install": ALLOW}), ("package_install",), (ALLOW, "package_install")),
])
def test_the_strictest_mode_of_the_categories_found_wins(policy, categories, expected) -> None:
    assert policy.mode_for(categories) == expected
