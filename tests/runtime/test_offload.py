"""``offload.Offload``, the composition root: what it builds from its config, two instances in
one process that share nothing, and ``close()``."""
from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from offload import Offload
from offload.config import OffloadConfig
from offload.engine.policy import DEFAULTS
from offload.subagents.config import DelegationConfig
from tests.engine.conftest import drain_queue, wait_event
from tests.runtime_support import dispatch

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def ledgers_of_their_own(monkeypatch):
    """Each runtime here opens the ledger of its own home (not a run-wide OFFLOAD_LEDGER_URL)."""
    monkeypatch.delenv("OFFLOAD_LEDGER_URL", raising=False)
FAST_STALLS = replace(DEFAULTS, stall_check_interval_s=0.02, stall_idle_s=0.1, stall_in_tool_s=0.1, stall_grace_s=0.1)


def frozen() -> tuple[str, bool]:
    return "no progress", False  # the same token on every sample: a stalled child


def test_the_policy_comes_from_the_config_and_the_ledger_from_the_home(tmp_path):
    cfg = OffloadConfig(delegation=DelegationConfig(stall_idle_seconds=7, stall_grace_seconds=3))
    with Offload(cfg, home=tmp_path) as off:
        assert (off.engine.policy().stall_idle_s, off.engine.policy().stall_grace_s) == (7.0, 3.0)
        assert off.ledger().location == str(tmp_path / "state.db")
        assert off.session_store().path == tmp_path / "state.db"
    with Offload(home=tmp_path, ledger_url="memory://elsewhere", policy=FAST_STALLS) as off:
        assert off.ledger().location.startswith("memory://") and off.engine.policy() is FAST_STALLS


def test_two_runtimes_in_one_process_share_nothing(tmp_path):
    """Both detect stalls with their own loops and deliver at once; no record, event, slot or
    row crosses over."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    with Offload(home=tmp_path / "a", policy=FAST_STALLS) as a, Offload(home=tmp_path / "b", policy=FAST_STALLS) as b:
        stuck = {off: threading.Event() for off in (a, b)}
        stalled = {off: dispatch(off, lambda s=stuck[off]: s.wait(30) and {"status": "interrupted"},
                                 goal=f"stalls in {off.home.name}", cap=1, session_key=off.home.name,
                                 interrupt_fn=stuck[off].set, progress_fn=frozen)["delegation_id"]
                   for off in (a, b)}
        done = {off: dispatch(off, lambda: {"status": "completed", "summary": f"from {off.home.name}"},
                              goal="quick", cap=2, session_key=off.home.name)["delegation_id"] for off in (a, b)}
        assert a.engine.stalls.thread is not b.engine.stalls.thread  # each runtime its own stall loop
        for off in (a, b):
            assert wait_event(stalled[off], bus=off.bus)["status"] in ("stalled", "interrupted", "error")
            assert stuck[off].is_set()  # its own stall loop interrupted it
            evt = wait_event(done[off], bus=off.bus)
            assert evt["summary"] == f"from {off.home.name}"
            claim = off.deliveries.claim_event(evt, "test")
            assert claim and off.deliveries.complete_event(evt, claim)
        for off, other in ((a, b), (b, a)):
            assert drain_queue(off.bus) == []  # nothing of the other runtime was published here
            assert {r["delegation_id"] for r in off.engine.list()} == {stalled[off], done[off]}
            assert off.ledger().get(done[other]) is None and off.ledger().get(stalled[other]) is None
            assert off.deliveries.get(done[off])["delivery_state"] == "delivered"
            assert off.ledger().location != other.ledger().location


def test_close_stops_everything_in_order_and_refuses_new_work(tmp_path):
    off = Offload(home=tmp_path, policy=FAST_STALLS)
    gate = threading.Event()
    handle = dispatch(off, lambda: gate.wait(30) and {"status": "completed", "summary": "late"}, progress_fn=frozen)
    assert handle["status"] == "dispatched"
    loops = [off.engine.stalls.thread, off.owner_loop.thread]
    assert all(t is not None and t.is_alive() for t in loops)
    off.close()
    assert not any(t.is_alive() for t in loops)  # the stall loop and the owner loop have stopped
    refused = dispatch(off, lambda: {"status": "completed"})
    assert refused["status"] == "rejected" and "closed" in refused["error"]
    off.close()  # idempotent
    gate.set()
    assert wait_event(handle["delegation_id"], bus=off.bus)["summary"] == "late"  # a running unit still reports


def test_an_agent_built_by_the_runtime_delegates_through_it(tmp_path):
    with Offload(OffloadConfig(base_url="http://127.0.0.1:9/v1", toolsets=["delegation"]), home=tmp_path) as off:
        agent = off.build_agent("sess_1")
        [tool] = agent.tools
        assert tool.name == "delegate_task" and tool.handler == off.delegate_tool.tool.handler
        child = agent.build_child(task_index=0, goal="g", context=None, toolsets=None)
        assert child.provided_toolsets == agent.provided_toolsets  # a child of a child could delegate here too
