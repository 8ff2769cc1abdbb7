"""Batch/unit async_delegation blocks: the per-task wall, unit phrase, errors, process notes."""
from __future__ import annotations

import re

from tools.process_registry_notifications import format_process_notification

TASK_HEADER = re.compile(r"^--- (✓|✗|⚠) TASK (\d+)/(\d+)")


def _headers(text: str) -> list[tuple[str, int, int]]:
    found = [TASK_HEADER.match(line) for line in text.splitlines()]
    return [(m.group(1), int(m.group(2)), int(m.group(3))) for m in found if m]


def test_results_list_without_is_batch_still_renders_as_batch(make_batch):
    evt = make_batch([{"task_index": 0, "status": "completed", "summary": "ok"}])
    del evt["is_batch"]
    assert format_process_notification(evt).startswith("[ASYNC DELEGATION BATCH COMPLETE — deleg_x1]")


def test_task_count_is_against_the_whole_call(make_batch):
    # A unit of a 4-task call that only ran task 3 still says "TASK 3/4".
    evt = make_batch([{"task_index": 2, "status": "completed", "summary": "ok"}],
                     goals=["a", "b", "c", "d"], task_indexes=[2])
    text = format_process_notification(evt)
    assert _headers(text) == [("✓", 3, 4)]
    assert "--- ✓ TASK 3/4: c  (status=completed) ---" in text
    assert "(1 subagent)" in text


def test_task_count_falls_back_to_results_when_goals_missing(make_batch):
    evt = make_batch([{"task_index": 1, "status": "failed", "error": "x"},
                      {"task_index": 0, "status": "completed", "summary": "ok"}], goals=None)
    assert _headers(format_process_notification(evt)) == [("✓", 1, 2), ("✗", 2, 2)]


def test_group_unit_phrase(make_batch):
    evt = make_batch([{"task_index": 0, "status": "completed", "summary": "ok"},
                      {"task_index": 1, "status": "completed", "summary": "ok"}], group="cmp",
                     goals=["a", "b", "c"], task_indexes=[0, 1])
    text = format_process_notification(evt)
    assert "A background fan-out unit (group 'cmp' (2 subagents)) you dispatched" in text
    assert "Other units of the same call report separately" in text and "sibling units" in text


def test_ungrouped_unit_phrase(make_batch):
    evt = make_batch([{"task_index": 1, "status": "completed", "summary": "ok"}], task_indexes=[1])
    assert "A background fan-out unit (1 subagent) you dispatched" in format_process_notification(evt)


def test_a_unit_that_is_the_whole_call_mentions_no_other_units(make_batch):
    whole = [{"task_index": 0, "status": "completed", "summary": "ok"}, {"task_index": 1, "status": "completed",
                                                                         "summary": "ok"}]
    for evt in (make_batch(whole), make_batch(whole, group="cmp"), make_batch(whole, task_indexes=[0, 1])):
        text = format_process_notification(evt)
        assert "A background fan-out (" in text and "Other units" not in text and "sibling" not in text


def test_error_without_results_renders_error_section_and_stops(make_batch, delegation_config):
    delegation_config["model"] = "m"
    evt = make_batch([], status="stalled", error="Background task stopped responding and was cancelled.")
    text = format_process_notification(evt)
    assert text.endswith(
        "\n\n--- ERROR ---\nThe batch did not complete successfully: "
        "Background task stopped responding and was cancelled."
    )
    assert _headers(text) == []
    assert "SUBAGENT MODEL REJECTED" not in text


def test_no_results_and_no_error_says_so(make_batch):
    assert format_process_notification(make_batch([])).endswith("\n\n(no task results were recorded)")


def test_done_but_not_done_summary_shows_status_error_and_partial_output(make_batch):
    evt = make_batch([{"task_index": 0, "status": "failed", "summary": "half", "error": "timeout"}])
    text = format_process_notification(evt)
    assert "--- ✗ TASK 1/2: task a  (status=failed) ---\n(failed: timeout)\nPartial output:\nhalf" in text


def test_truncation_marks_only_the_truncated_task(make_batch):
    evt = make_batch([
        {"task_index": 0, "status": "completed", "summary": "clean", "exit_reason": "completed"},
        {"task_index": 1, "status": "completed", "summary": "cut", "exit_reason": "max_iterations"},
    ])
    text = format_process_notification(evt)
    assert _headers(text) == [("✓", 1, 2), ("⚠", 2, 2)]
    assert text.index("TRUNCATED") > text.index("clean")


def test_process_accounting_lines(make_batch):
    entry = {
        "task_index": 0, "status": "completed", "summary": "ok",
        "handed_off_processes": [{"session_id": "proc_1", "command": "npm run dev"}],
        "orphaned_processes": ["proc_2", "proc_3"],
        "unread_completions": [{"session_id": "proc_4", "exit_code": 1, "output_tail": "FAILED x"}],
    }
    text = format_process_notification(make_batch([entry]))
    assert "Handed off to you: proc_1 (npm run dev) (still running; you now own these processes)." in text
    assert "Child left 2 background process(es) running that were TERMINATED when it finished: proc_2, proc_3." in text
    assert "Child's process proc_4 finished (exit 1) but the child never read its result; output tail:\nFAILED x" in text


def test_malformed_entries_are_skipped_not_fatal(make_batch):
    evt = make_batch(["not a dict", {"task_index": "x", "status": 7, "summary": ["a"]}, None])
    text = format_process_notification(evt)
    assert _headers(text) == [("✗", 1, 2)]


def test_a_call_of_one_task_is_not_called_a_batch_or_a_fan_out(make_batch):
    """``tasks=[{...}]`` with one task is a unit with one child: no "BATCH", no "fan-out (1 subagent)"."""
    evt = make_batch([{"task_index": 0, "status": "completed", "summary": "ok"}], goals=["only task"])
    text = format_process_notification(evt)
    assert text.startswith("[ASYNC DELEGATION COMPLETE — deleg_x1]")
    assert "BATCH" not in text and "fan-out" not in text
    assert "--- ✓ TASK 1/1: only task" in text
