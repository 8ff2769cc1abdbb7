"""What the dashboard's history page costs with 100,000 rows in the ledger (issue 30: under
300 ms). Not a timed test: a measurement to rerun and compare.

    .venv/bin/python -m bench.probes.history_cost [--rows 100000] [--rounds 7]

Fills a SQLite ledger with ``--rows`` finished rows (``bench.cases.ledger_fill``: real-sized task,
event and result JSON; every row finished in the last hour, so the charts read all of them),
then times ``GET /history`` through the real Starlette app: the first page (after the first
call, which opens the ledger), a page deep in the history by its keyset
link, a state filter, a goal search (a scan of the task JSON), the charts' window of one
hour, and the overview's counters (``/roster``: what every open overview re-reads each second). Prints the median and worst of ``--rounds`` per page, in milliseconds.
"""
from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

from bench.cases.ledger_fill import fill

LOOPBACK = "http://127.0.0.1"


def _time_ms(client, url: str, rounds: int) -> tuple[float, float]:
    spent = []
    for _ in range(rounds):
        started = time.perf_counter()
        answer = client.get(url)
        spent.append((time.perf_counter() - started) * 1000)
        assert answer.status_code == 200, (url, answer.status_code)
    return statistics.median(spent), max(spent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from starlette.testclient import TestClient

    from offload.dashboard.app import create_app
    from offload.runtime import Offload

    home = Path(tempfile.mkdtemp(prefix="offload-history-bench-"))
    started = time.perf_counter()
    fill(home / "state.db", args.rows, delivery_state="delivered")
    print(f"filled {args.rows} rows in {time.perf_counter() - started:.1f} s")
    with Offload(home=home) as off:
        app = create_app(off)  # the home's token, shown as a script does (Authorization: Bearer)
        client = TestClient(app, base_url=LOOPBACK, headers={"Authorization": f"Bearer {app.state.token()}"})
        started = time.perf_counter()
        first = client.get("/history").text
        print(f"first call (opens the ledger): {(time.perf_counter() - started) * 1000:.0f} ms")
        deep = re.findall(r'data-id="(deleg_fill\d+)"', first)[-1]
        middle = f"{time.time() - 3600 + args.rows / 2 * 1e-3!r}~{deep}"
        pages = {"first page": "/history", "page in the middle (keyset)": f"/history?before={middle}",
                 "state filter (failed: none match, a full index walk)": "/history?state=failed",
                 "goal search": "/history?q=bug+%2342",
                 "charts of the last hour": "/history?age=1h",
                 "overview (counters, owners, roster: /roster)": "/roster"}
        for name, url in pages.items():
            median, worst = _time_ms(client, url, args.rounds)
            print(f"{name:55s} median {median:6.0f} ms   worst {worst:6.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
