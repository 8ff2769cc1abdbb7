"""How a resumed child is described (issue 44 point 5): the result document's ``resumed`` (from
a child's entry and from its unit's ledger task), the one line the text views print, and the
count of model calls issued twice, which the replay knows (``Replayed.model_call_in_flight``)."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from offload.agent.step_log import replay
from offload.ledger import LedgerRow
from offload.render.resumed import child_resumed, resume_note, unit_resumed
from offload.views.result import from_event, from_row
from offload.subagents.resume import resumed_entry, span_attributes

AFTER = {"pid": 4242, "host": "box-a", "last_write_at": 1_700_000_000.0}
ENTRY = {"resumes": 1, "after": AFTER, "at": 1_700_000_005.0, "from_step": 7, "replies_kept": 2,
         "unknown_calls": ["run_command"], "calls_rerun": 0, "model_calls_reissued": 1}


@dataclass
class Step:
    seq: int
    kind: str
    payload: dict[str, Any]


def _reply(*calls: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": c, "type": "function", "function": {"name": "poke", "arguments": "{}"}} for c in calls]}


def test_the_line_says_from_which_step_after_whom_and_what_was_paid_twice():
    note = resume_note(child_resumed(ENTRY))
    assert note == ("↻ resumed from step 7 after pid 4242 on host box-a died, last seen 2023-11-14 22:13:20 UTC "
                    "(1 model call re-issued; 1 call answered as unknown: run_command)")
    twice = resume_note(child_resumed({**ENTRY, "resumes": 2, "model_calls_reissued": 0, "unknown_calls": [],
                                       "calls_rerun": 2, "after": {"pid": 1}}))
    assert twice == "↻ resumed 2 times from step 7 after pid 1 died (0 model calls re-issued; 2 read-only calls run again)"
    unit = unit_resumed({"durable": {"spec": {}, "resumes": 1, "after": AFTER, "at": 5.0, "first_dispatched_at": 1.0}},
                        [None])
    assert unit == {"resumes": 1, "after": AFTER, "at": 5.0, "first_dispatched_at": 1.0}
    assert resume_note(unit) == "↻ resumed after pid 4242 on host box-a died, last seen 2023-11-14 22:13:20 UTC"


def test_anything_malformed_reads_as_not_resumed_and_never_raises():
    assert child_resumed(None) is None and child_resumed(True) is None and child_resumed("yes") is None
    odd = child_resumed({"after": "x", "unknown_calls": "run_command", "from_step": "7"})
    assert odd["after"] == {"pid": None, "host": None, "last_write_at": None} and odd["unknown_calls"] == []
    assert odd["from_step"] == 0 and resume_note(odd).startswith("↻ resumed from step 0 after its owner died")
    assert unit_resumed({"durable": {"spec": {}, "resumes": 0}}, [None, None]) is None  # dispatched, never resumed


def test_the_document_carries_it_per_child_and_for_the_unit():
    evt = {"type": "async_delegation", "delegation_id": "deleg_1", "status": "completed", "is_batch": True,
           "goals": ["a", "b"], "results": [{"task_index": 0, "status": "completed", "summary": "a"},
                                            {"task_index": 1, "status": "completed", "summary": "b",
                                             "resumed": ENTRY}]}
    doc = from_event(evt).to_json()
    assert doc["children"][0]["resumed"] is None and doc["children"][1]["resumed"] == {**ENTRY}
    assert doc["resumed"] == {"resumes": 1, "after": AFTER, "at": ENTRY["at"], "first_dispatched_at": None}
    running = LedgerRow("deleg_2", "s", "running", 10.0, task={"goal": "g", "durable": {
        "spec": {}, "resumes": 1, "after": AFTER, "at": 11.0, "first_dispatched_at": 3.0}})
    doc = from_row(running).to_json()
    assert doc["state"] == "running" and doc["children"][0]["resumed"] is None  # not finished: no entry yet
    assert doc["resumed"]["first_dispatched_at"] == 3.0 and doc["resumed"]["after"]["pid"] == 4242


def test_a_model_call_is_counted_twice_only_when_the_log_ends_before_one():
    opening = [{"role": "user", "content": "go"}]
    unit = SimpleNamespace(resumed={"resumes": 1, "after": AFTER, "at": 5.0, "first_dispatched_at": 1.0})
    waiting = replay(opening, [Step(0, "reply", {"message": _reply("a")}),
                               Step(1, "tool_start", {"call_id": "a", "name": "poke"}),
                               Step(2, "tool_result", {"call_id": "a", "name": "poke", "content": "ok"})])
    cut = replay(opening, [Step(0, "reply", {"message": _reply("a")}),
                           Step(1, "tool_start", {"call_id": "a", "name": "poke"})])
    assert waiting.model_call_in_flight and not cut.model_call_in_flight
    counted = resumed_entry({"api_calls": 1}, waiting, unit)["resumed"]
    assert (counted["from_step"], counted["model_calls_reissued"], counted["replies_kept"]) == (3, 1, 1)
    assert "first_dispatched_at" not in counted  # the unit's, not the child's
    assert resumed_entry({"api_calls": 1}, cut, unit)["resumed"]["model_calls_reissued"] == 0  # it ran a tool
    fresh = resumed_entry({"api_calls": 2}, None, unit)["resumed"]  # no step logged: its first call was cut
    assert (fresh["from_step"], fresh["model_calls_reissued"], fresh["unknown_calls"]) == (0, 1, [])
    assert resumed_entry({"api_calls": 0}, None, unit)["resumed"]["model_calls_reissued"] == 0  # stopped before one
    attrs = span_attributes(counted)
    assert attrs["resumed"] is True and attrs["resume.after_pid"] == 4242 and attrs["resume.from_step"] == 3
    assert span_attributes(None) == {}


def test_the_text_views_make_the_ledgers_words_inert():
    from io import StringIO

    from rich.console import Console

    from offload.cli.result_summary import task_lines
    from offload.cli.views import ledger_finished

    hostile = {**ENTRY, "after": {**AFTER, "host": "box\x1b[2J"}, "unknown_calls": ["run\u202ecommand"]}
    event = {"type": "async_delegation", "delegation_id": "deleg_3", "status": "completed", "goal": "g",
             "results": [{"task_index": 0, "status": "completed", "summary": "ok", "resumed": hostile}]}
    row = LedgerRow("deleg_3", "s", "completed", 1.0, completed_at=2.0, task={"goal": "g"}, event=event,
                    result={"results": event["results"]})
    out = StringIO()
    Console(file=out, width=400, color_system=None).print(ledger_finished([row], "recent", now=3.0))
    shown = out.getvalue()
    assert "\x1b" not in shown and "\u202e" not in shown, shown
    assert "on host box\\x1b[2J died" in shown and "answered as unknown: run\\u202ecommand" in shown
    assert any(line.startswith("  ↻ resumed from step 7") for line in task_lines(event))  # Ui.result makes it inert
