"""The owner fingerprint stamped on every ledger row is read once per process, not per dispatch."""
from __future__ import annotations

import os
import sys

import pytest

from offload.engine import liveness


@pytest.fixture(autouse=True)
def _forget_fingerprint(monkeypatch):
    monkeypatch.setattr(liveness, "_own_fingerprint", None)


def _counting_reads(monkeypatch, value):
    calls = []

    def read(pid):
        calls.append(pid)
        return value(pid) if callable(value) else value
    monkeypatch.setattr(liveness, "process_start_time", read)
    return calls


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="start times come from /proc")
def test_current_owner_is_this_process_and_its_start_time():
    assert liveness.current_owner() == (os.getpid(), liveness.process_start_time(os.getpid()))


def test_the_start_time_is_read_once_per_process(monkeypatch):
    calls = _counting_reads(monkeypatch, 4242)
    assert liveness.current_owner() == liveness.current_owner() == (os.getpid(), 4242)
    assert calls == [os.getpid()]


def test_a_forked_child_reads_its_own_start_time(monkeypatch):
    calls = _counting_reads(monkeypatch, lambda pid: pid * 10)
    parent = liveness.current_owner()
    monkeypatch.setattr(liveness.os, "getpid", lambda: 999_999)
    assert liveness.current_owner() == (999_999, 9_999_990) != parent
    assert calls[-1] == 999_999


def test_an_unreadable_start_time_is_retried_next_time(monkeypatch):
    calls = _counting_reads(monkeypatch, None)
    assert liveness.current_owner() == (os.getpid(), None)
    liveness.current_owner()
    assert len(calls) == 2
