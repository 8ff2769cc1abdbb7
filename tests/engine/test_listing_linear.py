"""The listing does the same work for every live unit, however many there are (issue #11: a
listing of 1,000 live units must cost 10x one of 100). Counted, not timed: every Python and C
call the engine's listing makes and every read of a record, for n records. A listing that
scanned the roster, the slots or a list once per unit would make that count grow faster than n;
the time it takes is measured in bench case 2."""
from __future__ import annotations

import gc
import sys
from collections import Counter

import pytest

from offload.engine import roster
from offload.engine.engine import Delegations

pytestmark = pytest.mark.timeout(60)

_STATUSES = ("running", "stalling", "stalled", "finalizing", "completed")
_reads = Counter()


class CountingRecord(dict):
    """A record that counts its reads; the listing must read each record a fixed number of times."""

    def __getitem__(self, key):
        _reads["records"] += 1
        return super().__getitem__(key)

    def get(self, key, default=None):
        _reads["records"] += 1
        return super().get(key, default)

    def __iter__(self):
        _reads["records"] += 1
        return super().__iter__()

    def items(self):
        _reads["records"] += 1
        return super().items()


def _record(i: int) -> CountingRecord:
    """Live units of every status; active ones with a sampler reporting two children."""
    return CountingRecord(
        delegation_id=f"d{i}", goal=f"g{i}", status=_STATUSES[i % len(_STATUSES)], dispatched_at=1.0,
        is_batch=True, slot_key=f"d{i}", interrupt_fn=None, _progress_ts=90.0, _started=True,
        progress_fn=lambda: (((3, "terminal", 1.0), (1, None, None)), True),
        _stall_quiet_seconds=600.0, _stall_threshold_seconds=300.0, _stall_in_tool="terminal")


def listing_work(live: int) -> int:
    """Calls made and record reads done by one listing of ``live`` records."""
    engine = Delegations(ledger=lambda: None, publish=lambda evt: None,
                         records={f"d{i}": _record(i) for i in range(live)})
    engine.list()  # the first listing works out the layout's public keys; later ones reuse them
    calls = Counter()

    def count(frame, event, arg):
        calls[event] += 1

    _reads.clear()
    gc_was_on = gc.isenabled()
    gc.disable()  # a collection would run other code's gc callbacks (hypothesis has one) inside the count
    sys.setprofile(count)
    try:
        listed = engine.list()
    finally:
        sys.setprofile(None)
        if gc_was_on:
            gc.enable()
    assert len(listed) == live and listed[-1]["delegation_id"] == f"d{live - 1}"
    return calls["call"] + calls["c_call"] + _reads["records"]


def test_each_live_unit_adds_the_same_work_to_a_listing(monkeypatch):
    monkeypatch.setattr(roster, "_public_keys_by_layout", {})  # other tests' layouts may have filled it
    work = {live: listing_work(live) for live in (10, 100, 1000)}
    per_unit = (work[100] - work[10]) / 90
    # About 40 today: each public key read once (a counted read is also a call here), one
    # sampler call, each child's activity; a few dozen, whatever the count of units.
    assert 5 <= per_unit <= 60, f"{per_unit} calls and record reads per unit"
    assert work[1000] - work[100] == 900 * per_unit, f"work per listing {work}: not linear in the live units"


def test_the_count_sees_a_per_unit_scan_of_the_roster(monkeypatch):
    """The check above can fail: a listing that counts the roster's tasks once per unit."""
    monkeypatch.setattr(roster, "_public_keys_by_layout", {})
    public_copy = roster._public_copy
    roster_records: list = []

    def copy_and_scan(record):
        roster_records.append(record)
        roster.task_count(roster_records)  # grows with the units listed so far
        return public_copy(record)

    monkeypatch.setattr(roster, "_public_copy", copy_and_scan)
    work = {}
    for live in (10, 100, 1000):
        roster_records.clear()
        work[live] = listing_work(live)
    assert work[1000] - work[100] > 900 * (work[100] - work[10]) / 90
