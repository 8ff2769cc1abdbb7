"""A process that fills every background slot and the session's queue through the public API,
then dies at once (``os._exit``: nothing closed, nothing recovered).

``python fill_and_die.py HOME BASE_URL``: 10 slots (``delegation.max_concurrent_children``), 20
queued units of session ``fill`` (``max_queued_per_session``); prints ``filled`` then dies."""
from __future__ import annotations

import os
import sys

from offload import Offload
from offload.testing import DEMO_MODEL

SLOTS, QUEUED = 10, 20
SLOW = "Slow task: survey every file in depth."  # the demo model never finishes this one


def main(home: str, base_url: str) -> None:
    off = Offload(home=home, model=DEMO_MODEL, base_url=base_url,
                  delegation={"max_concurrent_children": SLOTS, "max_queued_per_session": QUEUED})
    for _ in range(SLOTS + QUEUED):
        off.delegate(SLOW, session="fill")
    states = [doc["state"] for doc in off.list("fill")]
    print(f"filled {states.count('running')} running {states.count('queued')} queued", flush=True)
    os._exit(9)


if __name__ == "__main__":
    main(*sys.argv[1:3])
