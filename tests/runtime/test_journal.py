"""The journal (offload/owner/journal.py): what happened to a unit beyond its row -- its children's
messages, tool calls and results with the time each was said, stall warnings, interrupts, each
child's end -- buffered by the runtime that runs it and written to the ledger in batches."""
from __future__ import annotations

import json
import threading
import time

import pytest

from offload.engine.units import batch_spec
from offload.origin import Origin
from offload.owner.journal import MAX_TEXT_CHARS, Journal, message_entry
from offload.ledger import open_ledger
from offload.runtime import Offload
from tests.e2e.conftest import offload
from tests.engine.conftest import wait_event

pytestmark = pytest.mark.timeout(90)


def test_a_real_run_journals_each_childs_messages_tool_calls_and_results_in_order(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    done = offload("run", "--demo-model", "compare the formats", HERMES_HOME=str(home))
    assert done.returncode == 0, done.stderr
    ledger = open_ledger(home / "state.db")
    try:
        [row] = ledger.settled_rows(10) or ledger.pending_rows()
        entries = ledger.read_journal(row.delegation_id)
    finally:
        ledger.close()
    terminal_child = [e for e in entries if e.child == 2 and e.kind != "child_end"]
    assert [e.kind for e in terminal_child] == ["message", "message", "tool_result", "message"]
    prompt, call, result, answer = terminal_child
    assert prompt.data["role"] == "user" and "python3 --version" in prompt.data["content"]
    [tool_call] = call.data["tool_calls"]
    assert tool_call["name"] == "run_command" and json.loads(tool_call["arguments"]) == {"command": "python3 --version && ls"}
    assert result.data["call_id"] == tool_call["id"] and "Python 3" in result.data["content"]
    assert answer.data["role"] == "assistant" and "Python 3" in answer.data["content"]
    assert [e.at for e in terminal_child] == sorted(e.at for e in terminal_child)  # the time each was said
    assert row.dispatched_at <= prompt.at and answer.at <= row.completed_at
    assert sorted(e.child for e in entries if e.kind == "child_end") == [0, 1, 2]
    assert all(e.data["status"] == "completed" for e in entries if e.kind == "child_end")


def test_interrupts_and_stall_warnings_are_journaled_for_this_runtimes_units_only(runtime, tmp_path):
    release = threading.Event()
    unit = runtime.engine.dispatch(batch_spec(["hold"], model="m", origin=Origin.capture("s")),
                                   lambda: (release.wait(30), {"results": []})[1], 10, interrupt_fn=release.set)
    did = unit["delegation_id"]
    with Offload(home=tmp_path / "other") as other:  # a second runtime in this process sees the notifications too
        assert runtime.engine.interrupt_one(did, reason="dashboard") == 1
        wait_event(did, bus=runtime.bus)
        runtime.owner_loop.flush_journal()
        other.owner_loop.flush_journal()
        assert other.ledger().read_journal(did) == []
    kinds = [(e.kind, e.data) for e in runtime.ledger().read_journal(did)]
    assert ("interrupt", {"reason": "dashboard"}) in kinds


def test_a_stall_warning_is_journaled_when_the_monitor_interrupts(runtime):
    release, started = threading.Event(), threading.Event()
    unit = runtime.engine.dispatch(batch_spec(["frozen"], model="m", origin=Origin.capture("s")),
                                   lambda: (started.set(), release.wait(30), {"results": []})[2], 10,
                                   interrupt_fn=release.set, progress_fn=lambda: (((0, None, 1.0),), False))
    did = unit["delegation_id"]
    assert started.wait(10)
    now = time.monotonic()
    runtime.engine.stalls.check(now)
    runtime.engine.stalls.check(now + runtime.policy.stall_idle_s + 1)
    wait_event(did, bus=runtime.bus)
    runtime.owner_loop.flush_journal()
    assert [e.kind for e in runtime.ledger().read_journal(did)][:1] == ["stall"]


def test_long_text_is_clipped_and_tool_calls_keep_their_names():
    kind, data = message_entry({"role": "assistant", "content": "x" * (MAX_TEXT_CHARS + 50),
                                "tool_calls": [{"id": "c1", "function": {"name": "web_search", "arguments": "{}"}}]})
    assert kind == "message" and data["content"].endswith("[50 more characters not kept]")
    assert data["tool_calls"] == [{"id": "c1", "name": "web_search", "arguments": "{}"}]


def test_a_failed_write_keeps_the_entries_for_the_next_flush():
    class Flaky:
        def __init__(self):
            self.fail, self.written = True, []

        def append_journal(self, entries):
            if self.fail:
                raise OSError("disk full")
            self.written.extend(entries)

    journal, ledger = Journal(owns=lambda did: True), Flaky()
    journal.note("deleg_1", "interrupt", reason="user")
    journal.flush(ledger)
    ledger.fail = False
    journal.flush(ledger)
    assert [(e.delegation_id, e.kind, e.data) for e in ledger.written] == [("deleg_1", "interrupt", {"reason": "user"})]


def test_a_unit_with_children_to_read_journals_when_it_started_and_one_without_does_not(runtime):
    said = [(time.time(), {"role": "user", "content": "go"})]
    with_reader = runtime.engine.dispatch(batch_spec(["read me"], model="m", origin=Origin.capture("s")),
                                          lambda: {"results": []}, 10, transcript_fn=lambda: [(0, said)])
    bare = runtime.engine.dispatch(batch_spec(["bench-like"], model="m", origin=Origin.capture("s")),
                                   lambda: {"results": []}, 10)
    for handle in (with_reader, bare):
        wait_event(handle["delegation_id"], bus=runtime.bus)
    runtime.owner_loop.flush_journal()
    kinds = [e.kind for e in runtime.ledger().read_journal(with_reader["delegation_id"])]
    assert "start" in kinds and "message" in kinds
    assert runtime.ledger().read_journal(bare["delegation_id"]) == []  # nothing journaled, nothing written
