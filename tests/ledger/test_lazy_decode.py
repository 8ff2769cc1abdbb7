"""Replay and recovery decode only the JSON columns they use (issue #11: "replay decodes only
what it needs"). A ``LedgerRow`` keeps ``task``/``event``/``result`` as stored text until one
is first read; these tests wrap the JSON decoder, tag each column's text, and fail if a path
decodes a column it does not use. Every backend of ``BACKENDS``; explicit ``now``, no sleep."""
from __future__ import annotations

import json
import queue
import threading
from collections import Counter

import pytest

from offload.engine.delivery import Deliveries
from offload.ledger import LedgerRow
from offload.ledger.codec import decode_row, dumps
from tests.ledger.test_contract import T0, dispatch_row, event_for, ledger, ledger_factory  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(60)

N = 12
DEAD_PID, LIVE_PID = 4242, 777


@pytest.fixture
def decoded(monkeypatch):
    """``decoded()`` -> how many times each tagged column (task, event, result) was parsed."""
    seen: list[str] = []
    real = json.loads

    def counting(raw, *args, **kwargs):
        seen.append(raw if isinstance(raw, str) else "")
        return real(raw, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    return lambda: Counter(kind for raw in seen for kind in ("task", "event", "result")
                           if f'"column":"{kind}"' in raw)


def _dispatch(ledger, delegation_id: str, pid: int):
    row = dispatch_row(delegation_id, owner_pid=pid, task={"goal": "g", "column": "task", "owner_cwd": "/nonexistent"})
    ledger.persist_dispatch(row, T0)
    return row


def test_replay_of_n_pending_rows_decodes_each_event_once_and_no_task_or_result(ledger, decoded):
    for i in range(N):
        row = _dispatch(ledger, f"deleg_{i:04d}", DEAD_PID)
        ledger.persist_completion(row, event_for(row, column="event"), {"status": "completed", "column": "result"},
                                  T0 + 10)
    target: queue.Queue = queue.Queue()
    before = decoded()

    offered = Deliveries(ledger=lambda: ledger, owner_alive=lambda pid, started: False).restore(target, now=T0 + 20)

    assert offered == N and target.qsize() == N
    assert decoded() - before == Counter(event=N)


def test_recovery_decodes_task_and_result_of_abandoned_rows_only(ledger, decoded):
    for i in range(N):
        _dispatch(ledger, f"deleg_dead_{i:04d}", DEAD_PID)
        ledger.record_unit_child(f"deleg_dead_{i:04d}", {"task_index": 0, "column": "result"}, T0 + 1)
        _dispatch(ledger, f"deleg_live_{i:04d}", LIVE_PID)
        ledger.record_unit_child(f"deleg_live_{i:04d}", {"task_index": 0, "column": "result"}, T0 + 1)
    before = decoded()

    settled = Deliveries(ledger=lambda: ledger, owner_alive=lambda pid, started: pid == LIVE_PID) \
        .recover_abandoned(now=T0 + 20)

    assert settled == N  # and the N live owners' rows were left alone, not even decoded
    assert decoded() - before == Counter(task=N, result=N)
    recovered = ledger.get("deleg_dead_0000")
    assert recovered.event["status"] == "unknown" and recovered.event["goal"] == "g"
    assert recovered.event["results"] == [{"task_index": 0, "column": "result"}]


def _stored_row(**columns: str | None) -> LedgerRow:
    raw = {"delegation_id": "d", "origin_session": "", "state": "completed", "dispatched_at": T0,
           "completed_at": T0, "updated_at": T0, "origin_ui_session_id": "", "origin_session_id": "",
           "parent_session_id": None, "task_json": None, "event_json": None, "result_json": None,
           "delivery_state": "pending", "delivery_attempts": 0, "delivered_at": None, "delivery_claim": None,
           "delivery_claimed_at": None, "owner_pid": None, "owner_started_at": None}
    raw.update(columns)
    return decode_row(raw)


def test_a_column_is_parsed_once_on_first_read_and_behaves_as_a_parsed_field(decoded):
    row = _stored_row(task_json=dumps({"column": "task"}), event_json="{not json", result_json="")

    assert decoded() == Counter()
    assert row.task is row.task == {"column": "task"}
    assert decoded() == Counter(task=1)
    assert row.event is None and row.result is None  # unreadable or empty: None, the row still reads
    row.task = {"replaced": True}
    assert row.task == {"replaced": True}
    assert row == _stored_row(task_json=dumps({"replaced": True}))


@pytest.mark.timeout(30)
def test_threads_reading_one_fresh_column_all_get_the_same_object(decoded):
    # A parse long enough for the threads to overlap: without the first-read lock they get
    # distinct objects in about 19 runs of 20 (about 1 in 20 with a column 15x smaller).
    row = _stored_row(event_json=dumps({"column": "event", "big": list(range(300_000))}))
    start, seen = threading.Barrier(8), []

    def read() -> None:
        start.wait(10)
        seen.append(row.event)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(seen) == 8 and all(e is seen[0] for e in seen)
    assert decoded() == Counter(event=1)
