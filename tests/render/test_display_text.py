"""The compact one-line UI title for a delegation result."""
from __future__ import annotations

import pytest

from tools.process_registry_notifications import async_delegation_display_text


@pytest.mark.parametrize("status, extra, label", [
    ("completed", {}, "Completed"),
    ("success", {}, "Completed"),
    ("completed", {"exit_reason": "max_iterations"}, "Incomplete"),
    ("failed", {}, "Failed"),
    ("error", {}, "Failed"),
    ("rejected", {}, "Failed"),
    ("cancelled", {}, "Interrupted"),
    ("interrupted", {}, "Interrupted"),
    ("timeout", {}, "Failed"),
    ("stalled", {}, "Stalled"),
    ("unknown", {}, "Unknown"),
    ("weird", {}, "Unknown"),
])
def test_single_task_labels(make_evt, status, extra, label):
    evt = make_evt(status=status, **extra)
    assert async_delegation_display_text(evt) == f"Subagent Task {label}: Investigate flaky test"


def test_one_result_batch_uses_its_goal(make_batch):
    evt = make_batch([{"task_index": 1, "status": "completed", "summary": "ok"}])
    assert async_delegation_display_text(evt) == "Subagent Task Completed: task b"


def test_several_results_share_an_outcome_and_join_goals(make_batch):
    evt = make_batch([{"task_index": 1, "status": "failed"}, {"task_index": 0, "status": "error"}])
    assert async_delegation_display_text(evt) == "Subagent Tasks Failed: task a; task b (2 tasks)"


def test_mixed_outcomes_are_partly_completed_and_prefer_the_group_name(make_batch):
    evt = make_batch([{"task_index": 0, "status": "completed", "summary": "ok"},
                      {"task_index": 1, "status": "failed"}], group="compare\napproaches")
    assert async_delegation_display_text(evt) == "Subagent Tasks Partly Completed: compare approaches (2 tasks)"


@pytest.mark.parametrize("statuses, stored, label", [
    (["completed", "interrupted"], "completed", "Partly Completed"),  # a stopped fan-out an older version stored
    (["interrupted", "interrupted"], "error", "Interrupted"),  # hermes' rule said error: nothing succeeded
    (["completed", "completed"], "completed", "Completed"),
    (["completed", "unknown"], "unknown", "Unknown"),  # the owner died: the engine's word wins
    (["completed", "stalled"], "stalled", "Stalled"),
])
def test_the_title_is_the_unit_state_its_children_give(make_batch, statuses, stored, label):
    evt = make_batch([{"task_index": i, "status": s, "summary": "ok"} for i, s in enumerate(statuses)], status=stored)
    assert async_delegation_display_text(evt).startswith(f"Subagent Tasks {label}: ")


def test_batch_without_results_uses_unit_status_and_goals(make_batch):
    evt = make_batch([], status="stalled")
    assert async_delegation_display_text(evt) == "Subagent Task Stalled: task a; task b"


def test_long_subject_is_clipped_to_one_short_line(make_evt):
    title = async_delegation_display_text(make_evt(goal="word " * 200))
    assert len(title) == len("Subagent Task Completed: ") + 200
    assert title.endswith("…") and "\n" not in title
