"""The renderer runs on events from JSON replays and older writers: it must never raise."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.process_registry_notifications import async_delegation_display_text, format_process_notification

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
_keys = st.sampled_from([
    "delegation_id", "goal", "goals", "context", "toolsets", "role", "model", "status", "summary",
    "error", "api_calls", "duration_seconds", "total_duration_seconds", "dispatched_at",
    "completed_at", "exit_reason", "truncated", "group", "task_indexes", "last_known_status",
    "task_transcripts", "transcript_tails", "git_state_hint", "n_tasks", "live_transcript",
    "message", "session_id", "command", "exit_code", "output", "pattern", "suppressed",
])
_entry = st.dictionaries(
    st.sampled_from(["task_index", "status", "summary", "error", "api_calls", "duration_seconds",
                     "exit_reason", "truncated", "live_transcript", "handed_off_processes",
                     "orphaned_processes", "unread_completions"]),
    _json, max_size=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=st.dictionaries(_keys, _json, max_size=10),
    results=st.one_of(st.none(), st.lists(st.one_of(_entry, _json), max_size=4)),
    flags=st.sampled_from([{}, {"is_batch": True}, {"task_failure_notice": True}]),
)
def test_any_event_renders_to_text_without_raising(fields, results, flags):
    evt = {**fields, **flags, "type": "async_delegation"}
    if results is not None:
        evt["results"] = results
    text = format_process_notification(evt)
    assert isinstance(text, str) and text
    assert isinstance(async_delegation_display_text(evt), str)


def test_rendering_reads_no_clock(monkeypatch, make_evt, make_batch):
    """Purity: the age comes from the event, so two renders of one event are identical forever."""
    import time

    def no_clock():
        raise AssertionError("the renderer must not read the clock")

    for name in ("time", "monotonic", "time_ns", "perf_counter"):
        monkeypatch.setattr(time, name, no_clock)
    batch = make_batch([{"task_index": 0, "status": "completed", "summary": "ok"}])
    assert "(12s ago)" in format_process_notification(make_evt())
    assert "(12s ago)" in format_process_notification(batch)
