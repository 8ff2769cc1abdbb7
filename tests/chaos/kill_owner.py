"""Owner process of one kill-fuzzing trial (run as a script; the test SIGKILLs it).

It dispatches a few fan-outs through a real ``offload.Offload`` (its engine and the ledger of
``$HERMES_HOME``) -- engine-level single units, whole-call batch units and grouped units
(``independent_completions``) through its ``delegate_task`` -- whose children finish at random
times, and keeps an append-only manifest, every line flushed and fsynced before the next step:

    READY                                   imports done, about to dispatch
    B <call> <json unit ids that may exist>  before a dispatch starts
    A <call> <json unit ids dispatched>     after it returned (``[]``: ran synchronously)
    R <unit> <task_index>                   ``record_unit_child`` returned True
    E <unit> <status>                       the completion event was queued (so it was
                                            persisted before: the row is terminal)
    DONE                                    nothing left to dispatch

With ``kill_at=N`` the owner also SIGKILLs itself right before (or right after) its N-th
ledger write, which lands kills on the narrow windows a timer rarely hits: between a dispatch
row and the handle, between the terminal write and the queue, inside a child record.
With ``when=batch-before`` / ``batch-after`` it dies instead right before (or right after) the
COMMIT of its N-th batched commit (one transaction holding two or more threads' writes), after
logging ``K <writes in the batch>``; every commit is slowed by a few ms there, as on a slow
disk, so that writes of concurrent children queue up into batches.

A child's goal says what it will do: ``c<call>t<task>:<ok|fail|crash>:<ms>``, so the
checker can derive every real result from the event alone.
"""
from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time

OUTCOMES = ("ok", "ok", "ok", "fail", "crash")


def main(manifest_path: str, seed: int, kill_at: int = 0, when: str = "before") -> None:
    rng = random.Random(seed)
    log = fsynced_log(manifest_path)
    from offload import Hooks, Offload
    from offload.engine.events import is_interim
    from offload.engine.units import UnitSpec
    from offload.origin import Origin
    from tests.delegate.fakes import FakeParent

    issued = [0]

    def new_delegation_id() -> str:  # predictable ids, so the manifest can name them up front
        issued[0] += 1
        return f"deleg_{issued[0]:04d}"

    delegation = {"config": {}}  # the delegation section of the call being made (set per call below)
    off = Offload(hooks=Hooks(new_id=new_delegation_id, delegation_config=lambda: delegation["config"]))
    real_record = off.engine.record_unit_child

    def record_unit_child(delegation_id, entry):
        ok = real_record(delegation_id, entry)
        if ok:
            log(f"R {delegation_id} {entry.get('task_index')}")
        return ok

    off.engine.record_unit_child = record_unit_child  # a unit's runner looks it up per finished child
    if kill_at and when.startswith("batch-"):
        _kill_in_batched_commit(kill_at, when.removeprefix("batch-"), log)
    elif kill_at:
        _kill_at_ledger_write(type(off.ledger()), kill_at, when)

    def watch_events() -> None:
        while True:
            evt = off.bus.completion_queue.get()
            # N: an interim failure notice (the unit still runs); E: the unit's final event.
            log(f"{'N' if is_interim(evt) else 'E'} {evt.get('delegation_id')} {evt.get('status')}")

    threading.Thread(target=watch_events, daemon=True).start()
    log("READY")
    for call in range(rng.randint(2, 5)):
        kind = rng.choice(("single", "batch", "grouped"))
        n = 1 if kind == "single" else rng.randint(1, 8)
        goals = [f"c{call}t{i}:{rng.choice(OUTCOMES)}:{rng.randint(0, 600)}" for i in range(n)]
        peek = f"deleg_{issued[0] + 1:04d}"
        maybe = [peek] + ([f"{peek}-{k}" for k in range(1, n + 1)] if kind == "grouped" else [])
        log(f"B {call} {json.dumps(maybe)}")
        if kind == "single":
            origin = Origin.capture("agent:main:cli:dm:owner")
            res = off.engine.dispatch(UnitSpec(goals[0], role="leaf", model="m", origin=origin),
                                      single_runner(goals[0]), 6)
            ids = [res["delegation_id"]] if res["status"] == "dispatched" else []
        else:
            grouped = kind == "grouped"
            delegation["config"] = {"independent_completions": grouped, "max_concurrent_children": 8}
            tasks = [{"goal": g, **({"group": rng.choice(("a", "b"))} if grouped and rng.random() < 0.6 else {})}
                     for g in goals]
            out = json.loads(off.delegate_tool(tasks=tasks, background=True, parent_agent=FakeParent(child_behaviour)))
            ids = ([u["delegation_id"] for u in out.get("units") or []] or [out["delegation_id"]]
                   if out.get("mode") == "background" else [])
        log(f"A {call} {json.dumps(ids)}")
        time.sleep(rng.uniform(0, 0.1))
    log("DONE")
    time.sleep(3600)  # wait to be killed


def fsynced_log(path: str):
    """``log(line)``: append ``line`` to the manifest at ``path``, fsynced before it returns
    (so a SIGKILL right after never loses it), from any thread."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    lock = threading.Lock()

    def log(line: str) -> None:
        with lock:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
    return log


def _kill_at_ledger_write(ledger_class: type, n: int, when: str) -> None:
    """``ledger_class``: SQLite, or PostgreSQL under OFFLOAD_TEST_LEDGER=postgresql."""
    writes = [0]
    lock = threading.Lock()

    def wrap(name: str) -> None:
        real = getattr(ledger_class, name)

        def write(self, *args, **kwargs):
            with lock:
                writes[0] += 1
                mine = writes[0]
            if mine == n and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            out = real(self, *args, **kwargs)
            if mine == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        setattr(ledger_class, name, write)

    for name in ("persist_dispatch", "record_unit_child", "persist_completion"):
        wrap(name)


def _kill_in_batched_commit(n: int, when: str, log) -> None:
    from offload.ledger.sqlite import SqliteLedger

    real_batch, real_commit = SqliteLedger._commit_batch, SqliteLedger._commit_transaction
    batched = [0]

    def commit_batch(self, batch):
        time.sleep(0.02)  # a slow sync: writers arriving meanwhile queue for the next batch
        real_batch(self, batch)

    def commit_transaction(self, conn, batch):
        batched[0] += 1  # only batched commits come here; the leader holds the ledger's lock
        if batched[0] == n and when == "before":
            log(f"K {len(batch)}")
            os.kill(os.getpid(), signal.SIGKILL)
        real_commit(self, conn, batch)
        if batched[0] == n:
            log(f"K {len(batch)}")
            os.kill(os.getpid(), signal.SIGKILL)

    SqliteLedger._commit_batch = commit_batch
    SqliteLedger._commit_transaction = commit_transaction


def parse_goal(goal: str) -> tuple[str, float]:
    _, outcome, ms = goal.split(":")
    return outcome, int(ms) / 1000


def child_behaviour(child) -> dict:
    outcome, delay_s = parse_goal(child.goal)
    time.sleep(delay_s)
    if outcome == "crash":
        raise RuntimeError(f"crash:{child.goal}")
    if outcome == "fail":
        return {"final_response": None, "error": f"boom:{child.goal}", "api_calls": 1, "completed": False}
    return {"final_response": f"real:{child.goal}", "completed": True, "api_calls": 1}


def single_runner(goal: str):
    def run() -> dict:
        outcome, delay_s = parse_goal(goal)
        time.sleep(delay_s)
        if outcome == "crash":
            raise RuntimeError(f"crash:{goal}")
        if outcome == "fail":
            return {"status": "failed", "summary": None, "error": f"boom:{goal}", "api_calls": 1}
        return {"status": "completed", "summary": f"real:{goal}", "api_calls": 1}
    return run


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *(int(sys.argv[3]), sys.argv[4]) if len(sys.argv) > 4 else ())
