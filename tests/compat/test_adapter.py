"""The hermes compat adapter (``compat/``): its module globals are the default runtime's, and
every name the acceptance suite patches is read through the runtime's hooks at call time."""
from __future__ import annotations

import json
import os
import threading

import pytest

import tools.async_delegation as ad
import tools.async_delegation_delivery as delivery
import tools.delegate_tool as dt
import tools.delegate_tool_dispatch as dtd
import tools.process_registry_notifications as prn
from offload.subagents.child import build_child_agent
from tests.delegate.fakes import FakeParent
from tests.engine.conftest import clean_engine, wait_event  # noqa: F401 - fixture
from tools.process_registry import process_registry

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("clean_engine")]


def dispatch(**kw) -> dict:
    return ad.dispatch_async_delegation(goal="g", context=None, toolsets=None, role="leaf", model="m", session_key="s",
                                        runner=kw.pop("runner", lambda: {"status": "completed", "summary": "ok"}), **kw)


def test_the_default_runtime_is_built_once_over_the_module_globals():
    off = ad.runtime()
    assert ad.runtime() is off and off.bus is process_registry
    assert off.engine.records is ad._records and off.engine.lock is ad._records_lock
    assert off.engine.slots is ad._active_slots
    gate = threading.Event()
    handle = dispatch(runner=lambda: gate.wait(10) and {"status": "completed", "summary": "ok"})
    assert ad._records[handle["delegation_id"]]["status"] == "running" and ad._active_slots
    gate.set()
    wait_event(handle["delegation_id"])


def test_patched_constants_and_seams_are_read_at_call_time(monkeypatch):
    monkeypatch.setattr(ad, "_STALE_IDLE_SECONDS", 3.5)
    assert ad.runtime().engine.policy().stall_idle_s == 3.5
    monkeypatch.setattr(ad, "_new_delegation_id", lambda: "deleg_patched")
    persisted = []
    monkeypatch.setattr(ad, "_persist_completion", lambda evt, result, snapshot=None: persisted.append(evt))
    handle = dispatch()
    assert handle["delegation_id"] == "deleg_patched"
    wait_event("deleg_patched")
    assert [e["delegation_id"] for e in persisted] == ["deleg_patched"]


@pytest.mark.skipif(bool(os.environ.get("OFFLOAD_TEST_LEDGER")), reason="the run's ledger is one PostgreSQL schema")
def test_the_ledger_follows_hermes_home_per_call(tmp_path, monkeypatch):
    first = delivery.current_ledger().location
    other = tmp_path / "other-home"
    other.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(other))
    assert ad.runtime().ledger().location == str(other / "state.db") != first


def test_delegate_task_reads_its_config_and_child_seams_from_the_adapter(monkeypatch):
    monkeypatch.setattr(dt, "_load_config", lambda: {"independent_completions": True})
    built: list[int] = []

    def build(**kw):
        built.append(kw["task_index"])
        return build_child_agent(**kw)
    monkeypatch.setattr(dt, "_build_child_agent", build)
    monkeypatch.setattr(dtd, "_finalize_child_results",
                        lambda entries, unit: [dict(e, summary="finalized here") for e in entries])
    handle = json.loads(dt.delegate_task(tasks=[{"goal": "first task here"}, {"goal": "second task here"}],
                                         background=True, parent_agent=FakeParent()))
    assert len(handle["units"]) == 2  # independent_completions came from the patched config
    events = [wait_event(u["delegation_id"]) for u in handle["units"]]
    assert sorted(built) == [0, 1]
    assert all(r["summary"] == "finalized here" for e in events for r in e["results"])


def test_the_renderer_reads_the_patched_delegation_config(monkeypatch):
    monkeypatch.setattr(prn, "_delegation_config", lambda: {"model": "cheap-model", "provider": "p"})
    evt = {"type": "async_delegation", "delegation_id": "d1", "goal": "g", "status": "failed", "summary": None,
           "error": "HTTP 400: cheap-model is not a valid model ID"}
    assert "cheap-model" in process_registry.render(evt)


def test_a_patched_runner_is_never_marked_durable_under_the_default_resume(monkeypatch, tmp_path):
    """``delegation.resume`` defaults to ``auto``, yet a unit whose children an injected runner runs (the
    acceptance suite's patched ``_run_single_child``) has no step log mark: recovered as before, never resumed."""
    from offload.agent.core import AIAgent
    from offload.subagents.config import DelegationConfig

    assert DelegationConfig().resume == "auto"
    monkeypatch.setattr(dt, "_run_single_child", lambda task_index, goal, **kw: {
        "task_index": task_index, "status": "completed", "summary": f"ran {goal}", "api_calls": 0})
    parent = AIAgent(model="m-1", base_url="http://127.0.0.1:9/v1", api_key="sk-parent", toolsets=[],
                     workspace=tmp_path)
    handle = json.loads(dt.delegate_task(goal="an injected runner's task", background=True, parent_agent=parent))
    event = wait_event(handle["delegation_id"])
    assert event["results"][0]["summary"] == "ran an injected runner's task"
    assert "durable" not in ad.runtime().ledger().get(handle["delegation_id"]).task
