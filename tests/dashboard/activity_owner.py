"""Another offload process for the activity tests: runs one 2-child unit whose children
report API calls and a current tool, and publishes them through the owner loop (as every
offload command does). Prints READY <id>; each stdin line ``next`` changes the first child's
activity (then prints NEXT); ``finish`` (or EOF) lets the unit finish, then it exits 0.

Usage: python activity_owner.py   (HERMES_HOME / OFFLOAD_LEDGER_URL from the environment)
"""
from __future__ import annotations

import sys
import threading
import time

from offload import owner_loop
from tools import async_delegation as ad
from tools.process_registry import process_registry


def main() -> None:
    owner_loop.install()
    done = threading.Event()
    since = time.time()
    activity = [(2, "web_search", since), (7, None, since)]

    def runner() -> dict:
        done.wait(60)
        return {"results": [{"task_index": i, "status": "completed", "summary": "ok"} for i in range(2)]}

    handle = ad.dispatch_async_delegation_batch(
        goals=["search the web", "think quietly"], context=None, toolsets=None, role=None, model="m",
        session_key="sess-other", runner=runner, interrupt_fn=done.set,
        progress_fn=lambda: (list(activity), activity[0][1] is not None), max_async_children=10)
    print("READY", handle["delegation_id"], flush=True)
    for line in sys.stdin:
        if line.strip() == "next":
            activity[0] = (5, "terminal", time.time())
            print("NEXT", flush=True)
        elif line.strip() == "finish":
            break
    done.set()
    process_registry.completion_queue.get(timeout=60)  # persisted before it is queued
    raise SystemExit(0)


if __name__ == "__main__":
    main()
