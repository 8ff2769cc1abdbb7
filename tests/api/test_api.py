"""The public Python API, through the public surface only (``offload`` and ``offload.testing``):
delegate -> results -> ack, fan-out with groups, redelivery after a crash and after close,
async iteration, stop, two homes at once, and the errors bad input gets."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from offload import Handle, Offload, OffloadError, RequestError, Result
from offload.testing import DEMO_MODEL, ScriptedModelServer, demo_model_script

HERE = Path(__file__).resolve().parent
YAML = "List the strengths of YAML for configuration files."
TOML = "List the strengths of TOML for configuration files."
QUICK = "Quick task: count the files in the workspace."
SLOW = "Slow task: survey every file in depth."  # the demo model never finishes this one
WAIT_S = 60.0


@pytest.fixture
def model():
    with ScriptedModelServer(demo_model_script) as server:
        yield server


def open_offload(home: Path, model: ScriptedModelServer, **settings) -> Offload:
    return Offload(home=home, model=DEMO_MODEL, base_url=model.url, **settings)


def drain(off: Offload, session: str, *, ack: bool = True) -> list[Result]:
    got = list(off.results(session, timeout_s=WAIT_S))
    for result in got if ack else ():
        assert result.ack() is True
    return got


def test_delegate_returns_a_handle_at_once_and_the_result_lands_once(tmp_path, model):
    with open_offload(tmp_path / "home", model) as off:
        handle = off.delegate(QUICK, session="s1")
        assert isinstance(handle, Handle) and handle.session == "s1" and handle.ids == (handle.id,)
        assert handle.goals == (QUICK,)
        [result] = drain(off, "s1")
        assert (result.id, result.session, result.state) == (handle.id, "s1", "completed")
        assert "3 files" in result.text and handle.id in result.text
        document = result.document()
        assert document["schema"] == "offload.result/1" and document["id"] == handle.id
        assert document["children"][0]["summary"].startswith("Counted the workspace")
        assert result.ack() is False  # acknowledged once already
        assert list(off.results("s1", timeout_s=WAIT_S)) == []
        [listed] = off.list()
        assert (listed["id"], listed["session"], listed["delivery_state"]) == (handle.id, "s1", "delivered")
    with open_offload(tmp_path / "home", model) as again:  # never again, not even after a restart
        assert list(again.results("s1", timeout_s=WAIT_S)) == []


def test_a_fan_out_reports_per_group_and_each_session_gets_only_its_own(tmp_path, model):
    with open_offload(tmp_path / "home", model, delegation={"independent_completions": True}) as off:
        handle = off.delegate(tasks=[{"goal": YAML, "group": "compare"}, {"goal": TOML, "group": "compare"},
                                     {"goal": QUICK}], session="fan")
        other = off.delegate(QUICK, session="other")
        assert len(handle.ids) == 2 and handle.groups == ("compare", None)
        results = {r.id: r for r in drain(off, "fan")}
        assert set(results) == set(handle.ids)
        compare = results[handle.ids[0]]
        assert compare.group == "compare" and "YAML" in compare.text and "TOML" in compare.text
        assert [[c["goal"] for c in doc["children"]] for doc in off.list("fan") if doc["id"] == handle.ids[0]] \
            == [[YAML, TOML]]
        assert [r.id for r in drain(off, "other")] == [other.id]


def test_a_result_recorded_by_a_process_that_crashed_is_delivered_by_the_next_once(tmp_path, model):
    home = tmp_path / "home"
    owner = run_owner("crash", home, model, "s-crash")
    assert owner.returncode == 9, owner.stdout + owner.stderr  # it died on purpose, before any ack
    delegation_id = owner.stdout.split()[1]
    assert f"finished {delegation_id}" in owner.stdout
    with open_offload(home, model) as off:
        [listed] = off.list("s-crash")
        assert listed["delivery_state"] == "pending"
        [result] = off.results("s-crash", timeout_s=WAIT_S)
        assert result.id == delegation_id and result.state == "completed" and "3 files" in result.text
        assert off.ack(delegation_id) is True  # by id works as result.ack() does
    with open_offload(home, model) as off:
        assert list(off.results("s-crash", timeout_s=WAIT_S)) == []
        assert off.list("s-crash")[0]["delivery_state"] == "delivered"


def test_a_result_taken_and_not_acknowledged_comes_back_after_its_process_closed(tmp_path, model):
    home = tmp_path / "home"
    owner = run_owner("close", home, model, "s2")
    assert owner.returncode == 0, owner.stdout + owner.stderr
    delegation_id = owner.stdout.split()[1]
    assert f"took {delegation_id}" in owner.stdout
    with open_offload(home, model) as off:
        [again] = drain(off, "s2")
        assert again.id == delegation_id and "3 files" in again.text
    with open_offload(home, model) as off:
        assert list(off.results("s2", timeout_s=WAIT_S)) == []


def run_owner(mode: str, home: Path, model: ScriptedModelServer, session: str) -> subprocess.CompletedProcess:
    """Another process on ``home`` (tests/api/crash_owner.py) that delegates QUICK and ends
    before acknowledging its result, crashing (``crash``) or closing (``close``)."""
    return subprocess.run([sys.executable, str(HERE / "crash_owner.py"), mode, str(home), model.url, QUICK, session],
                          capture_output=True, text=True, timeout=WAIT_S + 30)


def test_async_iteration_yields_every_result(tmp_path, model):
    async def collect(off: Offload, session: str) -> list[str]:
        ids = []
        async for result in off.aresults(session, timeout_s=WAIT_S):
            ids.append(result.id)
            result.ack()
        return ids

    with open_offload(tmp_path / "home", model) as off:
        first, second = off.delegate(YAML, session="a"), off.delegate(TOML, session="a")
        assert sorted(asyncio.run(collect(off, "a"))) == sorted([first.id, second.id])


def test_stop_interrupts_a_running_delegation_whose_partial_result_is_still_delivered(tmp_path, model):
    with open_offload(tmp_path / "home", model) as off:
        handle = off.delegate(SLOW, session="s3")
        assert model.wait_for_requests(1, timeout_s=WAIT_S)  # the child is at work (and will hang)
        with pytest.raises(TimeoutError, match=handle.id):
            next(off.results("s3", timeout_s=0.3))
        assert off.stop(handle.id) is True
        [result] = drain(off, "s3")
        assert result.id == handle.id and result.state == "interrupted"
        assert off.stop(handle.id) is False  # finished: nothing left to stop


@pytest.mark.sqlite_only  # the PostgreSQL rerun points every Offload at one shared ledger
def test_two_homes_at_once_keep_their_own_ledgers_and_results(tmp_path, model):
    with open_offload(tmp_path / "one", model) as one, open_offload(tmp_path / "two", model) as two:
        a, b = one.delegate(QUICK, session="same"), two.delegate(YAML, session="same")
        [from_two] = drain(two, "same")
        [from_one] = drain(one, "same")
        assert (from_one.id, from_two.id) == (a.id, b.id)
        assert "3 files" in from_one.text and "YAML" in from_two.text
        assert [i["id"] for i in one.list()] == [a.id] and [i["id"] for i in two.list()] == [b.id]


@pytest.mark.parametrize("call, fix", [
    ({"goal": "   "}, "goal is empty"),
    ({"goal": "TODO"}, "placeholder"),
    ({}, "exactly one of goal"),
    ({"goal": QUICK, "tasks": [{"goal": YAML}]}, "exactly one of goal"),
    ({"tasks": []}, "tasks"),
    ({"goal": QUICK, "toolsets": ["nope"]}, "unknown toolset"),
    ({"goal": QUICK, "session": " "}, "session must be a non-empty string"),
    ({"goal": QUICK, "toolsets": "terminal"}, r"toolsets is the string 'terminal': give a list of names, \['terminal'\]"),
    ({"tasks": ["a goal"]}, r"tasks\[0\] is 'a goal', a str; each task is a dict: tasks=\[\{'goal': 'a goal'\}\]"),
    ({"tasks": [{"goal": YAML, "toolsets": "web"}]}, r"tasks\[0\]\['toolsets'\] is the string 'web'"),
])
def test_bad_input_raises_one_error_type_naming_the_fix_and_starts_nothing(tmp_path, model, call, fix):
    with open_offload(tmp_path / "home", model) as off:
        with pytest.raises(RequestError, match=fix):
            off.delegate(**call)
        assert off.list() == [] and model.requests == []


def test_a_known_toolset_this_offloads_agents_lack_is_refused_not_dropped(tmp_path, model):
    with open_offload(tmp_path / "home", model, toolsets=["file"]) as off:
        with pytest.raises(RequestError, match=r"toolset\(s\) \['web'\] are not enabled for this Offload's agents "
                                               r"\(enabled: \['file'\]\); add them to `toolsets`"):
            off.delegate(QUICK, toolsets=["file", "web"])
        assert off.list() == [] and model.requests == []


def test_unknown_ids_closed_instances_and_bad_settings_are_refused_clearly(tmp_path, model):
    with open_offload(tmp_path / "home", model) as off:
        for call in (off.ack, off.stop):
            with pytest.raises(RequestError, match="no delegation 'deleg_nope'.*off.list"):
                call("deleg_nope")
    with pytest.raises(RequestError, match="closed"):
        off.delegate(QUICK)
    with pytest.raises(OffloadError, match="base_url"):
        Offload(home=tmp_path / "home", base_url="not a url")
    assert issubclass(RequestError, ValueError)


def test_a_full_background_pool_queues_the_call_and_results_wait_for_it(tmp_path, model):
    with open_offload(tmp_path / "home", model, delegation={"max_concurrent_children": 1}) as off:
        running = off.delegate(SLOW, session="full")
        queued = off.delegate(QUICK, session="full")  # delegation.at_capacity: queue (the default)
        assert [item["state"] for item in off.list() if item["id"] == queued.id] == ["queued"]
        off.stop(running.id)  # frees the slot: the queued call starts, and results() waits for it too
        got = {result.id: result.state for result in drain(off, "full")}
        assert got == {running.id: "interrupted", queued.id: "completed"}


def test_a_full_background_pool_refuses_the_call_instead_of_running_it_in_the_callers_thread(tmp_path, model):
    with open_offload(tmp_path / "home", model,
                      delegation={"max_concurrent_children": 1, "at_capacity": "refuse"}) as off:
        running = off.delegate(SLOW, session="full")
        with pytest.raises(RequestError, match="max_concurrent_children=1"):
            off.delegate(QUICK, session="full")
        assert [item["id"] for item in off.list()] == [running.id]
        off.stop(running.id)
        drain(off, "full")
