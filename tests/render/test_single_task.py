"""Single-task async_delegation blocks: status line, body per status, truncation, recovery."""
from __future__ import annotations

from tools.process_registry_notifications import format_process_notification


def _after_result(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[lines.index("--- RESULT ---") + 1:]


def test_failed_task_shows_status_error_and_partial_output(make_evt):
    text = format_process_notification(
        make_evt(status="failed", error="ValueError: bad input", summary="got halfway", api_calls=2)
    )
    assert "Status: failed   API calls: 2   Duration: 12s" in text
    assert _after_result(text) == [
        "The subagent did not complete successfully (status=failed).",
        "ValueError: bad input",
        "Partial output:",
        "got halfway",
    ]


def test_failed_task_without_summary_has_no_partial_output(make_evt):
    text = format_process_notification(make_evt(status="error", error="boom", summary=None))
    assert _after_result(text) == ["The subagent did not complete successfully (status=error).", "boom"]


def test_interrupted_task_names_the_reason(make_evt):
    text = format_process_notification(
        make_evt(status="interrupted", error="Async delegation cancelled", summary=None)
    )
    assert _after_result(text) == ["The subagent was interrupted before completing: Async delegation cancelled"]


def test_interrupted_task_without_error_still_says_interrupted(make_evt):
    text = format_process_notification(make_evt(status="interrupted", error=None, summary=None))
    assert _after_result(text) == ["The subagent was interrupted before completing."]


def test_truncated_single_gets_status_suffix_and_banner_before_summary(make_evt):
    text = format_process_notification(
        make_evt(summary="Did part of the work.", exit_reason="max_iterations")
    )
    assert "Status: completed   API calls: 4   Duration: 12s [TRUNCATED: hit max_iterations — work may be incomplete]" in text
    body = _after_result(text)
    assert body[0].startswith("[TRUNCATED — subagent hit its iteration cap")
    assert body[1] == "Did part of the work."


def test_explicit_truncated_flag_counts_as_truncated(make_evt):
    assert "TRUNCATED" in format_process_notification(make_evt(truncated=True, exit_reason="completed"))


def test_clean_completion_has_no_truncation_banner(make_evt):
    assert "TRUNCATED" not in format_process_notification(make_evt(exit_reason="completed"))


def test_missing_status_is_not_reported_as_success(make_evt):
    evt = make_evt()
    del evt["status"]
    text = format_process_notification(evt)
    assert "Status: unknown" in text
    assert "did not complete successfully (status=unknown)" in text


def test_recovered_single_shows_recovery_evidence_after_error(make_evt):
    evt = make_evt(
        status="unknown", summary=None, last_known_status="running",
        error="Delegation owner exited before recording a terminal result; outcome unknown.",
        task_transcripts={0: "/t/0.jsonl"}, transcript_tails={0: "tool: ok"},
    )
    assert _after_result(format_process_notification(evt)) == [
        "The subagent did not complete successfully (status=unknown).",
        "Delegation owner exited before recording a terminal result; outcome unknown.",
        "Last persisted unit status: running (before owner exit; not current liveness). "
        "Unrecorded outcomes remain unknown; inspect evidence before retrying side effects.",
        "Task index 0 transcript (may be incomplete): /t/0.jsonl",
        "--- last lines of task 0 transcript ---",
        "tool: ok",
        "--- end ---",
    ]


def test_no_recovery_lines_without_last_known_status(make_evt):
    text = format_process_notification(
        make_evt(status="failed", error="x", task_transcripts={0: "/t/0.jsonl"}, git_state_hint="main")
    )
    assert "Last persisted unit status" not in text
    assert "/t/0.jsonl" not in text


def test_preamble_omits_optional_lines_and_defaults_role_and_model(make_evt):
    evt = make_evt(context="", toolsets=[], role=None, model=None, dispatched_at=None)
    text = format_process_notification(evt)
    assert "Dispatched:" not in text
    assert "Context you provided" not in text
    assert "Toolsets:" not in text
    assert "Role: leaf   Model: ?" in text


def test_dispatched_age_without_completion_time_is_unknown(make_evt):
    text = format_process_notification(make_evt(completed_at=None))
    assert "Dispatched: 1970-01-01 00:16:40 (? ago)" in text


def test_api_calls_default_to_zero_and_bad_duration_is_unknown(make_evt):
    evt = make_evt(duration_seconds="soon")
    del evt["api_calls"]
    assert "Status: completed   API calls: 0   Duration: ?s" in format_process_notification(evt)
