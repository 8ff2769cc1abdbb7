"""The overview at a glance: counters read from the ledger (one grouped read), each linking to
the history rows it counts, badges in the CLI's tones, and the owner processes with their fate."""
from __future__ import annotations

import re
import time

import pytest

from offload.dashboard.app import create_app
from offload.dashboard.overview import FAILED_STATES
from offload.ledger import DispatchRow
from tests.dashboard.conftest import signed_in

pytestmark = pytest.mark.timeout(60)
LOOPBACK = "http://127.0.0.1"


def _finished_row(ledger, delegation_id: str, state: str, completed_ago_s: float) -> None:
    """A unit of another (long gone) process that ended ``state``, as its owner wrote it."""
    now = time.time()
    row = DispatchRow(delegation_id, "sess-other", now - completed_ago_s - 5, {"goal": f"ends {state}"},
                      owner_pid=1, owner_started_at=1)
    ledger.persist_dispatch(row, row.dispatched_at)
    ledger.persist_completion(row, {"status": state, "delegation_id": delegation_id}, {"status": state},
                              now - completed_ago_s)


def _counters(page: str) -> dict[str, int]:
    return {key: int(value) for key, value in re.findall(r'id="counter-(\w+)" data-value="(\d+)"', page)}


def test_counters_count_running_pending_and_recent_failures_and_stalls(runtime, held):
    ledger = runtime.ledger()
    held(["keeps running"])
    held(["a second running unit"]).finish()  # finished here: awaiting delivery
    _finished_row(ledger, "deleg_failed_now", "failed", 60)
    _finished_row(ledger, "deleg_error_now", "error", 120)
    _finished_row(ledger, "deleg_stalled_now", "stalled", 30)
    _finished_row(ledger, "deleg_failed_yesterday", "failed", 86400)
    ledger.mark_delivered("deleg_failed_yesterday", time.time())
    with signed_in(create_app(runtime)) as client:
        page = client.get("/roster").text
        assert _counters(page) == {"running": 1, "queued": 0, "pending": 4, "failed": 2, "stalled": 1}
        assert "1 failed, 1 error" in page or "1 error, 1 failed" in page  # the breakdown under the number
        failed_link = re.search(r'id="counter-failed"[^>]*>\s*<a href="([^"]+)"', page).group(1)
        listed = client.get(failed_link.replace("&amp;", "&")).text
        assert "deleg_failed_now" in listed and "deleg_error_now" in listed
        assert "deleg_stalled_now" not in listed and "deleg_failed_yesterday" not in listed


def test_badges_carry_the_tone_of_their_state(runtime, held):
    unit = held(["running"])
    _finished_row(runtime.ledger(), "deleg_stalled_now", "stalled", 10)
    with signed_in(create_app(runtime)) as client:
        page = client.get("/").text
        assert re.search(r'class="badge tone-active status status-running"[^>]*>running<', page)
        history = client.get("/history").text
        assert re.search(r'class="badge tone-bad status status-stalled"[^>]*>stalled<', history)
        detail = client.get(f"/d/{unit.delegation_id}").text
        assert re.search(r'id="status" data-state="running">running<', detail)


def test_owner_processes_are_listed_once_with_their_fate(runtime, held):
    import os

    held(["one"])
    held(["two"])
    _finished_row(runtime.ledger(), "deleg_old_owner", "completed", 10)
    with signed_in(create_app(runtime)) as client:
        page = client.get("/roster").text
    owners = re.findall(r'<li class="owner" data-fate="(\w+)" data-pid="(\d+)"', page)
    assert owners == [("alive", str(os.getpid())), ("exited", "1")]  # alive first, each pid once
    assert "2 running of 2 listed" in page


def test_failed_states_are_the_not_completed_ones_but_stalled():
    assert set(FAILED_STATES) == {"partial", "failed", "error", "interrupted", "unknown"}


def test_the_owner_panel_shows_the_living_and_only_the_last_few_exited(runtime, held):
    import os

    from offload.dashboard.overview import EXITED_OWNERS_SHOWN

    held(["still running"])
    ledger = runtime.ledger()
    for pid in range(2, 12):  # ten finished `offload run` processes, pid 11 the last to finish
        row = DispatchRow(f"deleg_run_{pid}", "sess-other", time.time() - 100, {"goal": "one run"},
                          owner_pid=pid, owner_started_at=1)
        ledger.persist_dispatch(row, row.dispatched_at)
        ledger.persist_completion(row, {"status": "completed", "delegation_id": row.delegation_id},
                                  {"status": "completed"}, time.time() - 60 + pid)
    with signed_in(create_app(runtime)) as client:
        page = client.get("/roster").text
    owners = re.findall(r'<li class="owner" data-fate="(\w+)" data-pid="(\d+)"', page)
    assert owners[0] == ("alive", str(os.getpid()))
    assert sorted(int(pid) for _fate, pid in owners[1:]) == list(range(12 - EXITED_OWNERS_SHOWN, 12))
    left_out = 10 - EXITED_OWNERS_SHOWN
    assert re.search(rf'id="owners-left-out" data-count="{left_out}">and {left_out} more owner process\(es\) '
                     r'that have exited; <a href="/history">history</a> lists their units', page)
    assert page.count("deleg_run_") >= 10  # the roster still lists every unit: only the panel is bounded
