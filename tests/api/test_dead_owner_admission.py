"""A dead process's units do not block the living (issue 41, point 8): a process that died with
every slot busy and its session's queue full leaves rows that a new ``Offload`` recovers (the
running ones) or adopts (the queued ones) before it would refuse a call at capacity. (On
SQLite a process counts only its own slots, so the call runs at once; the PostgreSQL rerun of
this suite is where the dead owner's slots were counted and the call was refused.) And a unit
its process died running is resumed by the next ``Offload``, whose ``results`` delivers it."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from offload.testing import ScriptedModelServer
from offload.testing.model_server import text_reply
from tests.api.fill_and_die import QUEUED, SLOTS
from tests.api.test_api import HERE, QUICK, WAIT_S, drain, model, open_offload  # noqa: F401 (fixture)

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


def test_results_delivers_the_resumed_unit_of_a_process_that_died_running_it(tmp_path):
    killed = threading.Event()

    def child(request):
        killed.wait(WAIT_S)  # the dead owner's call never gets its answer; the resumed one does at once
        return text_reply("the answer after the resume")

    home = tmp_path / "home"
    with ScriptedModelServer(child) as server:
        owner = subprocess.Popen([sys.executable, str(HERE / "crash_owner.py"), "hang", str(home), server.url,
                                  QUICK, "s"], stdout=subprocess.PIPE, text=True)
        try:
            assert server.wait_for_requests(1, timeout_s=WAIT_S)  # its child is in its first model call
        finally:
            owner.kill()
            dispatched = owner.communicate(timeout=WAIT_S)[0]
        killed.set()
        with open_offload(home, server) as off:  # resume: auto (the default)
            # Its first look at the ledger recovers the unit and queues it to resume here: results
            # waits for it (it returned at once when it had counted what runs before that look).
            [result] = drain(off, "s")
    assert f"dispatched {result.id}" in dispatched
    assert result.state == "completed" and "the answer after the resume" in result.text
    assert result.document()["resumed"]["resumes"] == 1 and len(server.requests) == 2
