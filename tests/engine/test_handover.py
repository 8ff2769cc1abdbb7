"""The engine's safe point for a hand-over (``offload.engine.handover``): a child of a unit being
handed over is parked before its next reply or side-effecting call is logged, a call already
running may finish, and parked children go on (into the ledger's fence) once released."""
from __future__ import annotations

import threading
import time

import pytest

from offload.engine.handover import HandOver

pytestmark = pytest.mark.timeout(30)


class _Ledger:
    def __init__(self) -> None:
        self.writes: list[list[str]] = []

    def append_steps(self, delegation_id, task_index, steps, owner, now) -> bool:
        self.writes.append([kind for _, kind, _ in steps])
        return True


def _unit_progress(ledger: _Ledger):
    from offload.engine.unit_progress import UnitProgress

    unit = UnitProgress()
    unit.lock, unit.records, unit.handover = threading.Lock(), {"u1": {"_ledger": ledger}}, HandOver()
    return unit


def _step(unit, kind: str, call_id: str | None) -> None:
    unit.record_steps("u1", 0, [(0, kind, {"call_id": call_id})])


def _stepping(unit, *steps: tuple[str, str | None]) -> tuple[threading.Thread, list[str]]:
    done: list[str] = []

    def child() -> None:
        for kind, call_id in steps:
            _step(unit, kind, call_id)
            done.append(kind)
    thread = threading.Thread(target=child, daemon=True)
    thread.start()
    return thread, done


def test_a_running_call_may_finish_and_the_next_reply_is_parked_until_release():
    unit = _unit_progress(_Ledger())
    handover = unit.handover
    _step(unit, "reply", None)
    _step(unit, "tool_start", "c1")  # a side-effecting call runs now
    handover.begin(["u1"])
    assert not handover.wait_quiet(["u1"], time.monotonic() + 0.05)  # still running: the bound passes
    thread, done = _stepping(unit, ("tool_result", "c1"), ("reply", None))
    assert handover.wait_quiet(["u1"], time.monotonic() + 5)  # its result was written: quiet
    thread.join(0.2)
    assert done == ["tool_result"] and thread.is_alive()  # the next reply waits at the safe point
    handover.release()
    thread.join(5)
    assert done == ["tool_result", "reply"]


def test_a_second_hand_over_parks_again():
    unit = _unit_progress(_Ledger())
    handover = unit.handover
    handover.begin(["u1"])
    handover.release()  # the first (a signal's) ended
    thread, done = _stepping(unit, ("reply", None))
    thread.join(5)
    assert done == ["reply"]  # between hand-overs nothing parks
    handover.begin(["u1"])  # the second (the client's own exit)
    thread, done = _stepping(unit, ("reply", None))
    thread.join(0.2)
    assert done == [] and thread.is_alive()  # parked at its safe point again
    handover.release()
    thread.join(5)
    assert done == ["reply"]


def test_other_units_are_never_parked_and_a_handed_unit_is_remembered():
    unit = _unit_progress(_Ledger())
    handover = unit.handover
    handover.begin(["u2"])
    thread, done = _stepping(unit, ("reply", None), ("tool_start", "c1"))
    thread.join(5)
    assert done == ["reply", "tool_start"]
    handover.handed("u2")
    assert handover.was_handed("u2") and not handover.was_handed("u1")


@pytest.mark.parametrize("batch, before_park", [
    ([(0, "reply", {}), (1, "tool_start", {"call_id": "c1"})], []),  # parked before anything is written
    ([(2, "tool_result", {"call_id": "c1"}), (3, "tool_start", {"call_id": "c2"})], [["tool_result"]]),
])
def test_a_batch_of_steps_writes_its_results_and_parks_before_a_reply_or_mark(batch, before_park):
    ledger = _Ledger()
    unit = _unit_progress(ledger)
    unit.handover.begin(["u1"])
    thread = threading.Thread(target=unit.record_steps, args=("u1", 0, batch), daemon=True)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive() and ledger.writes == before_park  # a result written first, the rest waits
    unit.handover.release()
    thread.join(5)
    assert [kind for write in ledger.writes for kind in write] == [kind for _, kind, _ in batch]
