"""A process that delegates through the public API and ends before its result is acknowledged.

``python crash_owner.py MODE HOME BASE_URL GOAL SESSION``: opens an ``Offload`` on HOME with the
scripted model at BASE_URL, delegates GOAL for SESSION and prints ``dispatched ID``. Then, by MODE:

- ``crash``: waits until the ledger lists the unit as finished (recorded, unacknowledged), prints
  ``finished ID`` and dies at once (``os._exit(9)``: nothing closed, acknowledged or given back);
- ``close``: takes the result from ``results()``, prints ``took ID``, and closes the ``Offload``
  without acknowledging it (exit 0);
- ``hang``: waits (its unit running) until the test kills it.
"""
from __future__ import annotations

import os
import sys
import time

from offload import Offload
from offload.testing import DEMO_MODEL

FINISH_WITHIN_S = 60.0


def main(mode: str, home: str, base_url: str, goal: str, session: str) -> None:
    off = Offload(home=home, model=DEMO_MODEL, base_url=base_url)
    handle = off.delegate(goal, session=session)
    print(f"dispatched {handle.id}", flush=True)
    if mode == "hang":
        time.sleep(FINISH_WITHIN_S)
        os._exit(2)
    if mode == "close":
        for result in off.results(session, timeout_s=FINISH_WITHIN_S):
            print(f"took {result.id}", flush=True)
        off.close()
        return
    deadline = time.monotonic() + FINISH_WITHIN_S
    while time.monotonic() < deadline:
        if any(doc["id"] == handle.id and doc["completed_at"] is not None for doc in off.list()):
            print(f"finished {handle.id}", flush=True)
            os._exit(9)
        time.sleep(0.05)  # another process's ledger row: nothing to wait on but the row itself
    print(f"{handle.id} did not finish within {FINISH_WITHIN_S:g} s", flush=True)
    os._exit(2)


if __name__ == "__main__":
    main(*sys.argv[1:6])
