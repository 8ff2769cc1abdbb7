"""Another offload process for the activity tests: runs one 2-child unit whose children
report API calls and a current tool, and publishes them through its runtime's owner loop (as
every offload command does). Prints READY <id>; each stdin line ``next`` changes the first child's
activity (then prints NEXT); ``finish`` (or EOF) lets the unit finish, then it exits 0.

Usage: python activity_owner.py   (HERMES_HOME / OFFLOAD_LEDGER_URL from the environment)
"""
from __future__ import annotations

import sys
import threading
import time

from offload import Offload
from offload.engine.units import batch_spec
from offload.origin import Origin


def main() -> None:
    with Offload() as off:
        raise SystemExit(run(off))


def run(off: Offload) -> int:
    done = threading.Event()
    since = time.time()
    activity = [(2, "web_search", since), (7, None, since)]

    def runner() -> dict:
        done.wait(60)
        return {"results": [{"task_index": i, "status": "completed", "summary": "ok"} for i in range(2)]}

    spec = batch_spec(["search the web", "think quietly"], model="m", origin=Origin.capture("sess-other"))
    handle = off.engine.dispatch(spec, runner, 10, interrupt_fn=done.set,
                                 progress_fn=lambda: (list(activity), activity[0][1] is not None))
    print("READY", handle["delegation_id"], flush=True)
    for line in sys.stdin:
        if line.strip() == "next":
            activity[0] = (5, "terminal", time.time())
            print("NEXT", flush=True)
        elif line.strip() == "finish":
            break
    done.set()
    off.bus.completion_queue.get(timeout=60)  # persisted before it is queued
    return 0


if __name__ == "__main__":
    main()
