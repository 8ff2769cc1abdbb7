"""The owner loop (``offload.owner.loop``) on a fake clock: when it acts on control requests
and publishes activity, how a notification wakes it, and that it ends (withdrawing what it
published) with the last live unit. The real loop across processes: test_activity.py and the
dashboard's interrupt tests."""
from __future__ import annotations

import threading

import pytest

from offload.owner.loop import POLL_S, SHARED_POLL_S, OwnerLoop
from offload.owner.activity import INTERVAL_S
from offload.testing import FakeClock

pytestmark = pytest.mark.timeout(30)


class Units:
    """The engine as the owner loop sees it: how many units are live, and their listing."""

    def __init__(self) -> None:
        self.live = 1

    def active_count(self) -> int:
        return self.live

    def list(self) -> list[dict]:
        return [{"delegation_id": f"d{i}", "status": "running"} for i in range(self.live)]


class Recorded(OwnerLoop):
    """Records what the loop does, and when, instead of reading and writing a ledger."""

    def __init__(self, clock: FakeClock, ledger: object) -> None:
        super().__init__(clock=clock, engine=Units(), ledger=lambda: ledger)
        self.clock, self.did = clock, []

    def tick(self, ledger, engine, now=None) -> None:
        self.did.append(("control", self.clock.now()))

    def publish(self, ledger, items) -> None:
        self.did.append(("activity", self.clock.now(), len(items)))


class Listener:
    def __init__(self, on_ids) -> None:
        self.on_ids, self.listening, self.stopped = on_ids, threading.Event(), False
        self.listening.set()

    def stop(self) -> None:
        self.stopped = True


class NotifyingLedger:
    def __init__(self) -> None:
        self.listeners: list[Listener] = []

    def watch_control(self, on_ids) -> Listener:
        self.listeners.append(Listener(on_ids))
        return self.listeners[-1]


def test_on_a_local_ledger_it_polls_control_publishes_activity_and_ends_with_the_last_unit():
    clock = FakeClock()
    owner = Recorded(clock, object())
    assert clock.scheduled() == {}  # an idle process runs no loop
    owner.start()  # what the engine does on a dispatch
    clock.advance(INTERVAL_S)
    controls = [at for kind, at, *_ in owner.did if kind == "control"]
    assert controls == [i * POLL_S for i in range(int(INTERVAL_S / POLL_S) + 1)]
    assert ("activity", INTERVAL_S, 1) in owner.did and owner.thread is None

    owner._units().live = 0
    owner.did.clear()
    clock.advance(POLL_S)
    assert owner.did == [("control", INTERVAL_S + POLL_S), ("activity", INTERVAL_S + POLL_S, 0)]  # withdrawn
    assert not owner.loop.running and clock.scheduled() == {}

    owner._units().live = 1
    owner.start()  # the next dispatch begins a new spell at once
    clock.advance(0)
    assert owner.did[-1] == ("control", INTERVAL_S + POLL_S)


def test_on_a_notifying_ledger_it_polls_slowly_and_a_request_wakes_it_at_once():
    clock, ledger = FakeClock(), NotifyingLedger()
    owner = Recorded(clock, ledger)
    owner.start()
    clock.advance(0)
    (listener,) = ledger.listeners
    assert clock.scheduled() == {"offload-owner-loop": INTERVAL_S}  # activity is due first now
    clock.advance(3.0)
    listener.on_ids(["d0"])  # a request made on some host
    clock.advance(0)
    assert [at for kind, at, *_ in owner.did if kind == "control"] == [0.0, 3.0]
    clock.advance(SHARED_POLL_S)
    assert [at for kind, at, *_ in owner.did if kind == "control"] == [0.0, 3.0, 3.0 + SHARED_POLL_S]

    owner.stop()
    assert listener.stopped and owner.did[-1] == ("activity", clock.now(), 0)
    assert not owner.loop.running and clock.scheduled() == {}
