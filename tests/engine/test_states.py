"""The one rule from children to unit (``offload.engine.states``), and old words read in new ones."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.engine.states import (
    CHILD_STATES,
    TERMINAL_UNIT_STATES,
    child_state,
    event_state,
    result_state,
    unit_state,
    unit_state_of,
)

RAW_WORDS = st.sampled_from([*CHILD_STATES, "success", "error", "timeout", "cancelled", "rejected", None, "weird"])


@given(st.lists(RAW_WORDS, min_size=1, max_size=6))
def test_completed_only_when_every_child_completed_and_partial_when_some_did(words):
    state = unit_state_of(words)
    done = [child_state(w) == "completed" for w in words]
    assert state in TERMINAL_UNIT_STATES
    assert (state == "completed") == all(done)
    assert (state == "partial") == (any(done) and not all(done))


@given(st.lists(RAW_WORDS, min_size=1, max_size=6))
def test_without_a_completed_child_the_unit_takes_the_shared_word_else_failed(words):
    states = {child_state(w) for w in words}
    if "completed" in states:
        return
    states = {"unknown" if s in ("queued", "running") else s for s in states}
    assert unit_state_of(words) == (states.pop() if len(states) == 1 else "failed")


@pytest.mark.parametrize("word, state", [
    ("success", "completed"), ("timeout", "failed"), ("rejected", "failed"), ("cancelled", "interrupted"),
    ("error", "error"), (None, "unknown"), ("", "unknown"), ("weird", "unknown"), ("Completed ", "completed"),
])
def test_foreign_and_older_words_read_as_child_states(word, state):
    assert child_state(word) == state


def test_unit_words_keep_the_live_states_and_partial():
    assert [unit_state(w) for w in ("queued", "running", "stalling", "finalizing", "partial", "success")] == [
        "queued", "running", "stalling", "finalizing", "partial", "completed"]


def test_a_unit_without_child_results_is_error_with_an_error_else_unknown():
    assert result_state({"results": [], "error": "RuntimeError: x"}, is_batch=True) == "error"
    assert result_state({"results": []}, is_batch=True) == "unknown"
    assert result_state({}, is_batch=False) == "completed"  # hermes: a single runner's {} is a completion
    assert result_state({"status": "cancelled"}, is_batch=False) == "interrupted"


def test_an_event_an_older_version_stored_reads_in_todays_words():
    stopped = {"status": "completed", "results": [{"status": "completed"}, {"status": "interrupted"}]}
    assert event_state(stopped) == "partial"  # hermes' rule called it completed
    assert event_state({"status": "error", "results": [{"status": "interrupted"}]}) == "interrupted"
    assert event_state({"status": "error", "results": []}) == "error"


def test_the_engine_ends_a_unit_stalled_or_unknown_whatever_finished():
    recovered = {"status": "unknown", "results": [{"status": "completed"}, {"status": "unknown"}]}
    stalled = {"status": "stalled", "results": [{"status": "completed"}, {"status": "stalled"}]}
    assert event_state(recovered) == "unknown" and event_state(stalled) == "stalled"
    assert event_state({"status": "running", "results": [{"status": "failed"}]}) == "running"  # an interim notice
