"""Interim per-task failure notices and the non-delegation event types on the completion bus."""
from __future__ import annotations

import pytest

from tools.process_registry_notifications import format_process_notification


def _interim(**over):
    evt = {
        "type": "async_delegation", "task_failure_notice": True, "is_batch": True,
        "delegation_id": "deleg_w1", "status": "running", "n_tasks": 5,
        "goals": ["a", "b", "c", "scrape page 4", "e"],
        "results": [{"task_index": 3, "status": "failed", "duration_seconds": 7.5,
                     "error": "Traceback:\n  boom", "live_transcript": "/t/3.jsonl"}],
    }
    evt.update(over)
    return evt


def test_interim_failure_notice_golden():
    assert format_process_notification(_interim()) == (
        "[ASYNC DELEGATION TASK FAILED — deleg_w1, task 4/5]\n"
        "One task of a background fan-out failed while its sibling tasks are still running. This "
        "is an early warning: the consolidated results of the whole unit will follow when every "
        "task has finished. You can act on this failure now, e.g. re-dispatch just this task.\n"
        "\n"
        "Task: scrape page 4\n"
        "Status: failed   Duration: 7.5s\n"
        "Error: Traceback: boom\n"
        "Live transcript: /t/3.jsonl"
    )


def test_interim_error_is_capped_at_400_chars():
    text = format_process_notification(_interim(results=[{"task_index": 0, "status": "failed", "error": "e" * 1000}]))
    error_line = next(line for line in text.splitlines() if line.startswith("Error: "))
    assert len(error_line) == len("Error: ") + 400


def test_interim_without_n_tasks_counts_goals_and_without_error_says_so():
    text = format_process_notification(_interim(n_tasks=None, results=[{"task_index": 1, "status": "failed"}]))
    assert text.startswith("[ASYNC DELEGATION TASK FAILED — deleg_w1, task 2/5]")
    assert "Error: (no error reported)" in text
    assert "Live transcript" not in text


@pytest.mark.parametrize("event", [{"type": "mystery"}, {}, {"type": None}, {"type": 3}, None, "text", [],
                                   {"type": "completion", "session_id": "proc_9", "exit_code": 1},
                                   {"type": "heartbeat"}, {"type": "watch_match"}, {"type": "watch_disabled"}])
def test_unknown_or_malformed_events_render_as_none(event):
    # hermes' background-process events included: nothing here produces them.
    assert format_process_notification(event) is None
