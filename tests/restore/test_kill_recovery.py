"""A real owner process is SIGKILLed in the middle of a fan-out unit. A fresh interpreter must
replay the unit once: the children that finished keep their real results, the rest are
``unknown``; once acknowledged, nothing is replayed again."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

UNIT_ID = "deleg_killed01"

OWNER = r'''
import json, os, pathlib, threading
from offload import Offload
from offload.engine.units import batch_spec
from offload.origin import Origin

off = Offload()  # never closed: the test SIGKILLs this process
marker = pathlib.Path(os.environ["KILL_MARKER"])
unit_id = os.environ["UNIT_ID"]

def runner():
    recorded = [off.engine.record_unit_child(unit_id, {"task_index": i, "status": "completed", "summary": f"finished {i}",
                                               "api_calls": i + 1, "model": "m"}) for i in (0, 1)]
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(recorded))
    os.replace(tmp, marker)  # the test never reads a half-written marker
    threading.Event().wait()  # task 2 never finishes

handle = off.engine.dispatch(batch_spec(
    ["first goal", "second goal", "third goal"], context="ctx", role="leaf", model="m",
    origin=Origin.capture("agent:main:telegram:dm:42", "parent-1"), delegation_id=unit_id), runner, 3)
assert handle["status"] == "dispatched", handle
threading.Event().wait()
'''

RESTORE = r'''
import json, queue
from offload import Offload
q = queue.Queue()
with Offload() as off:
    count = off.deliveries.restore(q)
events = [q.get_nowait() for _ in range(q.qsize())]
print(json.dumps({"count": count, "events": events}))
'''

ACK = r'''
import os
from offload import Offload
with Offload() as off:
    print(off.deliveries.mark_delivered(os.environ["UNIT_ID"]))
'''


@pytest.mark.timeout(60)
def test_a_killed_owner_is_replayed_with_its_finished_children(tmp_path, child_env, wait_for, run_python):
    home = tmp_path / "owner-home"
    home.mkdir()
    marker = tmp_path / "children-recorded"
    env = child_env(home, KILL_MARKER=str(marker), UNIT_ID=UNIT_ID)
    owner = subprocess.Popen([sys.executable, "-c", OWNER], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: marker.exists() or owner.poll() is not None, 30, "the owner to record two children")
        assert marker.exists(), f"the owner exited early:\n{owner.communicate()[1]}"
        assert json.loads(marker.read_text()) == [True, True]
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.communicate(timeout=20)
    assert owner.returncode == -signal.SIGKILL

    out = json.loads(run_python(RESTORE, home, UNIT_ID=UNIT_ID).stdout.strip().splitlines()[-1])

    assert out["count"] == 1
    (evt,) = out["events"]
    assert (evt["delegation_id"], evt["status"], evt["restored"]) == (UNIT_ID, "unknown", True)
    assert (evt["session_key"], evt["parent_session_id"]) == ("agent:main:telegram:dm:42", "parent-1")
    assert evt["goals"] == ["first goal", "second goal", "third goal"]
    by_index = {r["task_index"]: r for r in evt["results"]}
    assert sorted(by_index) == [0, 1, 2]
    for i in (0, 1):
        assert by_index[i] == {"task_index": i, "status": "completed", "summary": f"finished {i}",
                               "api_calls": i + 1, "model": "m"}
    assert (by_index[2]["status"], by_index[2]["summary"]) == ("unknown", None)
    assert "2/3 child results were recorded" in evt["error"]

    assert run_python(ACK, home, UNIT_ID=UNIT_ID).stdout.strip() == "True"
    again = json.loads(run_python(RESTORE, home).stdout.strip().splitlines()[-1])
    assert again == {"count": 0, "events": []}
