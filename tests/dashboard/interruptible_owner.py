"""Another offload process for the dashboard's interrupt test: honours control requests in
the ledger (as every offload command does), runs one unit until interrupted, prints READY <id>, and exits 0
once the unit's result is recorded.

Usage: python interruptible_owner.py   (HERMES_HOME from the environment)
"""
from __future__ import annotations

import threading

from offload import owner_loop
from tools import async_delegation as ad
from tools.process_registry import process_registry


def main() -> None:
    owner_loop.install()
    stop = threading.Event()

    def runner() -> dict:
        stop.wait(60)
        return {"results": [{"task_index": 0, "status": "interrupted" if stop.is_set() else "completed",
                             "summary": None, "error": "interrupted from the dashboard"}]}

    handle = ad.dispatch_async_delegation_batch(goals=["wait for the interrupt"], context=None, toolsets=None,
                                                role=None, model="m", session_key="sess-other", runner=runner,
                                                interrupt_fn=stop.set)
    print("READY", handle["delegation_id"], flush=True)
    event = process_registry.completion_queue.get(timeout=60)  # persisted before it is queued
    raise SystemExit(0 if event["results"][0]["status"] == "interrupted" else 1)


if __name__ == "__main__":
    main()
