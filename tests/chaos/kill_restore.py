"""Restore side of a kill-fuzzing trial: a fresh interpreter replays the dead owner's ledger.

With ``registry`` as argument it goes through the lazy replay of the completion bus a consumer
uses (``Offload.bus.restore_completions()``), otherwise through ``Offload.deliveries.restore``. Prints one JSON object: ``{"count": <restore's return>, "events": [...], "rows": [...]}``;
``rows`` is every ledger row after the restore, for the checker and for diagnostics.
"""
from __future__ import annotations

import json
import queue
import sqlite3
import sys

from offload import Offload
from offload.home import state_db_path
from tests.postgres_support import pg_ledger_rows, wait_for_dead_owners_leases


def main(via_registry: bool) -> None:
    wait_for_dead_owners_leases()  # another host's owner is presumed dead only once its lease expired
    with Offload() as off:
        if via_registry:
            q = off.bus.completion_queue
            count = off.bus.restore_completions()
        else:
            q = queue.Queue()
            count = off.deliveries.restore(q)
    events = []
    while not q.empty():
        events.append(q.get_nowait())
    rows = []
    pg = pg_ledger_rows("delegation_id, state, delivery_state, result_json")
    if pg is not None:
        rows = [dict(zip(("delegation_id", "state", "delivery_state", "result_json"), r)) for r in pg]
    elif state_db_path().exists():
        conn = sqlite3.connect(state_db_path())
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute(
            "SELECT delegation_id, state, delivery_state, result_json FROM async_delegations")]
        conn.close()
    json.dump({"count": count, "events": events, "rows": rows}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:] == ["registry"])
