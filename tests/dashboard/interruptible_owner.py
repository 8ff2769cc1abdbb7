"""Another offload process for the dashboard's interrupt test: honours control requests in
the ledger (its runtime's owner loop, as in every offload command), runs one unit until
interrupted, prints READY <id>, and exits 0 once the unit's result is recorded.

Usage: python interruptible_owner.py   (HERMES_HOME from the environment)
"""
from __future__ import annotations

import threading

from offload import Offload
from offload.engine.units import batch_spec


def main() -> None:
    with Offload() as off:
        raise SystemExit(run(off))


def run(off: Offload) -> int:
    stop = threading.Event()

    def runner() -> dict:
        stop.wait(60)
        return {"results": [{"task_index": 0, "status": "interrupted" if stop.is_set() else "completed",
                             "summary": None, "error": "interrupted from the dashboard"}]}

    handle = off.engine.dispatch(batch_spec(["wait for the interrupt"], model="m", session_key="sess-other"),
                                 runner, 3, interrupt_fn=stop.set)
    print("READY", handle["delegation_id"], flush=True)
    event = off.bus.completion_queue.get(timeout=60)  # persisted before it is queued
    return 0 if event["results"][0]["status"] == "interrupted" else 1


if __name__ == "__main__":
    main()
