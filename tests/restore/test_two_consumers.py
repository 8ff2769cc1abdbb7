"""Two consumer processes on one ``state.db``: the durable claim is the only cross-process
gate, so every pending row (and every row both recover from a dead owner) is delivered by
exactly one of them; and a consumer that dies holding a claim leaves the row to the next
consumer at once."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

import tools.async_delegation_delivery as delivery

ROWS = 20
ABANDONED = 5

# Restore, then wait until every consumer has its replay queued, so both contend for every row.
CONSUMER = r'''
import os, pathlib, queue, sys, time
from offload import Offload

name, rendezvous, expected = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
q = queue.Queue()
off = Offload()
off.deliveries.restore(q)
(rendezvous / name).touch()
deadline = time.monotonic() + 30
while len(list(rendezvous.iterdir())) < expected:
    assert time.monotonic() < deadline, "the other consumer never got ready"
    time.sleep(0.01)
while not q.empty():
    evt = q.get_nowait()
    claim = off.deliveries.claim_event(evt, name)
    if claim:
        assert off.deliveries.complete_event(evt, claim), evt["delegation_id"]
        print(evt["delegation_id"], flush=True)
off.close()
'''

# Claims the one replayed row, reports it, and then hangs as if the turn injection wedged.
CLAIM_AND_HANG = r'''
import queue, threading
from offload import Offload
off = Offload()  # never closed: the test kills this process
q = queue.Queue()
off.deliveries.restore(q)
evt = q.get_nowait()
print(off.deliveries.claim_event(evt, "consumer-A"), flush=True)
threading.Event().wait()
'''

# B starts after A died holding its claim: under the default (5-minute) claim lease it gets
# the row at once, because A's claim names a holder that is gone.
CLAIM_AFTER_DEATH = r'''
import json, queue
from offload import Offload
with Offload() as off:
    q = queue.Queue()
    off.deliveries.restore(q)
    evt = q.get_nowait()
    claim = off.deliveries.claim_event(evt, "consumer-B")
    print(json.dumps({"claim": claim, "completed": off.deliveries.complete_event(evt, claim)}))
'''


@pytest.mark.timeout(60)
def test_two_consumer_processes_deliver_every_row_exactly_once(seed, tmp_path, _isolated_hermes_home, child_env):
    now = time.time()
    ids = [seed(f"deleg_{i:02d}", completed_at=now - 100 + i) for i in range(ROWS)]
    abandoned = [seed(f"deleg_run_{i}") for i in range(ABANDONED)]  # both consumers recover these at once
    delivery.reset_for_tests()  # the seeding connection is closed before the consumers start
    rendezvous = tmp_path / "ready"
    rendezvous.mkdir()
    env = child_env(_isolated_hermes_home)

    consumers = {name: subprocess.Popen([sys.executable, "-c", CONSUMER, name, str(rendezvous), "2"],
                                        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
                 for name in ("consumer-A", "consumer-B")}
    delivered: dict[str, list[str]] = {}
    for name, proc in consumers.items():
        out, err = proc.communicate(timeout=45)
        assert proc.returncode == 0, f"{name} failed:\n{err}"
        delivered[name] = out.split()

    a, b = delivered["consumer-A"], delivered["consumer-B"]
    assert len(a) == len(set(a)) and len(b) == len(set(b))
    assert set(a).isdisjoint(b), f"delivered twice: {sorted(set(a) & set(b))}"
    assert sorted(a + b) == sorted(ids + abandoned)
    for delegation_id in ids + abandoned:
        row = delivery.get_durable_delegation(delegation_id)
        assert (row["delivery_state"], row["delivery_attempts"]) == ("delivered", 1), delegation_id
    assert {delivery.get_durable_delegation(i)["state"] for i in abandoned} == {"unknown"}


@pytest.mark.timeout(60)
def test_a_consumer_that_dies_mid_delivery_leaves_the_row_to_the_next_consumer_at_once(
        seed, tmp_path, _isolated_hermes_home, child_env, run_python):
    seed("deleg_orphaned", completed_at=time.time() - 30)
    delivery.reset_for_tests()
    env = child_env(_isolated_hermes_home)

    a = subprocess.Popen([sys.executable, "-c", CLAIM_AND_HANG], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        claim_line = a.stdout.readline().strip()  # A prints right after claiming, then hangs
        assert claim_line.startswith("consumer-A:"), a.stderr.read() if a.poll() is not None else claim_line
    finally:
        a.send_signal(signal.SIGKILL)
        a.communicate(timeout=20)
    held = delivery.current_ledger().get("deleg_orphaned")
    assert (held.delivery_state, held.delivery_attempts, held.delivery_claim_pid) == ("pending", 1, a.pid)

    done = run_python(CLAIM_AFTER_DEATH, _isolated_hermes_home, timeout_s=45)
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert out["claim"].startswith("consumer-B:") and out["completed"] is True
    row = delivery.get_durable_delegation("deleg_orphaned")
    assert (row["delivery_state"], row["delivery_attempts"]) == ("delivered", 2)
