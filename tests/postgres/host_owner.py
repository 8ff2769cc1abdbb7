"""One owner "host" of the multi-host tests (run as a script; the test kills or pauses it).

Its host id, ledger URL and lease come from the environment and ``$HERMES_HOME/config.yaml``
the test writes (read by its ``offload.Offload``). It dispatches ONE background fan-out through
the runtime's ``delegate_task`` whose children are named by their goals:

    ok        finishes at once with ``real:<goal>``
    hang      never finishes (the test kills the owner)
    gate      finishes with ``real:<goal>`` once the file ``<HERMES_HOME>/go`` exists

and prints one line per step, flushed, for the test to wait on:

    D <delegation id>                 dispatched
    R <delegation id> <task_index>    ``record_unit_child`` returned True (durable)
    X <delegation id> <task_index>    ``record_unit_child`` returned False (refused)
    E <delegation id> <status>        the completion event reached the in-memory queue
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def child_behaviour(child) -> dict:
    if child.goal.startswith("hang"):
        threading.Event().wait()
    if child.goal.startswith("gate"):
        go = Path(os.environ["HERMES_HOME"]) / "go"
        while not go.exists():  # a paused owner cannot be told by an event; the file outlives SIGSTOP
            time.sleep(0.02)
    return {"final_response": f"real:{child.goal}", "completed": True, "api_calls": 1}


def main(goals: list[str]) -> None:
    from offload import Offload
    from offload.config import load_config
    from offload.engine.events import is_interim
    from tests.delegate.fakes import FakeParent

    cfg = load_config()
    off = Offload(cfg.model_copy(update={"delegation": cfg.delegation.model_copy(
        update={"max_concurrent_children": 8})}))  # never closed: the test kills or pauses this process
    real_record = off.engine.record_unit_child

    def record_unit_child(delegation_id, entry):
        ok = real_record(delegation_id, entry)
        say(f"{'R' if ok else 'X'} {delegation_id} {entry.get('task_index')}")
        return ok

    off.engine.record_unit_child = record_unit_child  # the unit runner looks it up per child
    out = json.loads(off.delegate_tool(tasks=[{"goal": g} for g in goals], background=True,
                                       parent_agent=FakeParent(child_behaviour)))
    say(f"D {out['delegation_id']}")
    evt = off.bus.completion_queue.get()
    while is_interim(evt):  # an early warning; the unit's final event follows
        evt = off.bus.completion_queue.get()
    say(f"E {evt['delegation_id']} {evt['status']}")
    threading.Event().wait()  # stay alive (holding the lease) until the test ends us


if __name__ == "__main__":
    main(sys.argv[1:])
