"""A dead process's units do not block the living (issue 41, point 8): a process that died with
every slot busy and its session's queue full leaves rows that a new ``Offload`` recovers (the
running ones) or adopts (the queued ones) before it would refuse a call at capacity. (On
SQLite a process counts only its own slots, so the call runs at once; the PostgreSQL rerun of
this suite is where the dead owner's slots were counted and the call was refused.)"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.api.fill_and_die import QUEUED, SLOTS
from tests.api.test_api import HERE, QUICK, WAIT_S, model, open_offload  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(180)


def test_a_new_offload_is_not_refused_for_the_units_of_a_process_that_died(tmp_path, model):
    home = tmp_path / "home"
    died = subprocess.run([sys.executable, str(HERE / "fill_and_die.py"), str(home), model.url],
                          capture_output=True, text=True, timeout=WAIT_S + 30)
    assert f"filled {SLOTS} running {QUEUED} queued" in died.stdout, died.stdout + died.stderr
    # resume: never -- the dead owner's running units are recovered, not queued again to resume
    # (resumed, they would fill the session's queue: a call then is refused, saying so).
    with open_offload(home, model, delegation={"max_concurrent_children": SLOTS, "resume": "never",
                                               "max_queued_per_session": QUEUED}) as off:
        handle = off.delegate(QUICK, session="fill")  # refused before: "all 10 background slots are busy ..."
        documents = {doc["id"]: doc for doc in off.list("fill")}
        assert documents[handle.id]["state"] in ("running", "queued", "completed")
        if os.environ.get("OFFLOAD_TEST_LEDGER") == "postgresql":
            # A shared ledger counts slots on every host: the dead owner's running rows held them
            # (its lease still live) until this process recovered them, and adopted its queue.
            states = [doc["state"] for doc in documents.values()]
            assert states.count("unknown") == SLOTS and states.count("queued") <= QUEUED
