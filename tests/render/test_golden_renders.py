"""Complete renders pinned character for character, so any formatting drift is a conscious change."""
from __future__ import annotations

from tools.process_registry_notifications import format_process_notification

SINGLE_COMPLETED = """\
[ASYNC DELEGATION COMPLETE — deleg_x1]
A background subagent you dispatched earlier has finished. You may have moved on since then, \
so the full task it was given is repeated below: act on the result, or re-dispatch the task if \
it is still needed.

Dispatched: 1970-01-01 00:16:40 (12s ago)
Original goal: Investigate flaky test
Context you provided: repo /tmp/p
Toolsets: terminal
Role: leaf   Model: m

Status: completed   API calls: 4   Duration: 12s
--- RESULT ---
Found the bug in test_foo"""

BATCH_MIXED = """\
[ASYNC DELEGATION BATCH COMPLETE — deleg_x1]
A background fan-out (group 'review' (3 subagents)) you dispatched earlier has finished. Act \
on these results or re-dispatch what failed.

Dispatched: 1970-01-01 00:16:40 (18m5s ago)
Context you provided: repo /tmp/p
Toolsets: web, file
Role: leaf   Model: m   Total duration: 30.5s
Outcome: partial — 2 of 3 tasks completed (1 truncated: may be incomplete), 1 failed

--- ✓ TASK 1/3: clean task  (status=completed, api_calls=5, 40s) ---
finished cleanly
Full live transcript (complete tool/assistant trace): /tmp/t0.jsonl

--- ⚠ TASK 2/3: truncated task  (status=completed, api_calls=250, 600.5s, TRUNCATED: hit \
max_iterations — work may be incomplete) ---
[TRUNCATED — subagent hit its iteration cap; the summary below may be incomplete. Verify \
before relying on it, or re-dispatch the unfinished part.]
cut off mid-work

--- ✗ TASK 3/3: failing task  (status=failed, api_calls=2, 3.25s) ---
(no summary — status=failed: HTTP 500 from tool)"""

RECOVERED_PARTIAL = """\
[ASYNC DELEGATION BATCH COMPLETE — deleg_x1]
A background fan-out (2 subagents) you dispatched earlier has finished. Act on these results \
or re-dispatch what failed.

Dispatched: 1970-01-01 00:16:40 (2h3m ago)
Role: leaf   Model: m   Total duration: 30.5s
Outcome: unknown — 1 of 2 tasks completed, 1 unknown

Last persisted unit status: running (before owner exit; not current liveness). Unrecorded \
outcomes remain unknown; inspect evidence before retrying side effects.
Task index 1 transcript (may be incomplete): /home/u/.hermes/transcripts/t1.jsonl
--- last lines of task 1 transcript ---
assistant: running pytest
tool: 3 failed
--- end ---
Owner working tree at recovery: main @ abc1234 fix flaky test (2 uncommitted file(s)) in /tmp/p
Unit error: Delegation owner exited before the unit finished; 1/2 child results were recorded \
and are included below, the rest are unknown.

--- ✓ TASK 1/2: task a  (status=completed, api_calls=1, 0.1s) ---
done: fast member

--- ✗ TASK 2/2: task b  (status=unknown) ---
(no summary — status=unknown: outcome unknown (owner exited))"""


def test_single_completed_golden(make_evt):
    assert format_process_notification(make_evt()) == SINGLE_COMPLETED


def test_batch_with_mixed_statuses_golden(make_batch):
    # Results arrive out of order on purpose: the wall is sorted by task_index.
    evt = make_batch(
        [
            {"task_index": 2, "status": "failed", "summary": None, "error": "HTTP 500 from tool",
             "api_calls": 2, "duration_seconds": 3.25},
            {"task_index": 0, "status": "completed", "summary": "finished cleanly", "api_calls": 5,
             "duration_seconds": 40.0, "exit_reason": "completed", "live_transcript": "/tmp/t0.jsonl"},
            {"task_index": 1, "status": "completed", "summary": "cut off mid-work", "api_calls": 250,
             "duration_seconds": 600.5, "exit_reason": "max_iterations", "truncated": True},
        ],
        goals=["clean task", "truncated task", "failing task"], group="review",
        completed_at=2085.0, toolsets=["web", "file"],
    )
    assert format_process_notification(evt) == BATCH_MIXED


def test_recovered_partial_unit_golden(make_batch):
    evt = make_batch(
        [
            {"task_index": 0, "status": "completed", "summary": "done: fast member",
             "api_calls": 1, "duration_seconds": 0.1},
            {"task_index": 1, "status": "unknown", "summary": None,
             "error": "outcome unknown (owner exited)"},
        ],
        status="unknown", last_known_status="running", restored=True,
        error=("Delegation owner exited before the unit finished; 1/2 child results were "
               "recorded and are included below, the rest are unknown."),
        task_transcripts={"1": "/home/u/.hermes/transcripts/t1.jsonl"},
        transcript_tails={"1": "assistant: running pytest\ntool: 3 failed"},
        git_state_hint="main @ abc1234 fix flaky test (2 uncommitted file(s)) in /tmp/p",
        completed_at=1000.0 + 2 * 3600 + 3 * 60, context=None, toolsets=[],
    )
    assert format_process_notification(evt) == RECOVERED_PARTIAL


def test_a_unit_without_a_known_duration_says_so(make_batch):
    evt = make_batch([{"task_index": 0, "status": "unknown"}], total_duration_seconds=None, duration_seconds=None)
    assert "Total duration: unknown" in format_process_notification(evt)
