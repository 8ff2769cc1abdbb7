"""Case 5 — the PostgreSQL ledger: the PostgreSQL column of cases 1 and 3, and units/s
through N ``offload worker`` processes.

Needs a server: ``OFFLOAD_BENCH_POSTGRES_DSN``, else ``OFFLOAD_TEST_POSTGRES_DSN`` (what
``eval "$(.ci/postgres-up)"`` exports); without one the case is skipped with that reason.
Every measurement gets a fresh schema, dropped afterwards.

- per-delegation cost (case 1's offload run): the same N trivial delegations with the ledger
  in SQLite and in PostgreSQL, in the same round, each side after ``WARMUP`` untimed ones;
  headline PostgreSQL / SQLite wall time.
- ledger growth (case 3's dispatch burst): dispatch p50 into a PostgreSQL ledger holding
  ``rows`` delivered rows (written with COPY) / into an empty one.
- workers: ``units`` queued units, one subagent each against the loopback model server (its
  reply takes ``reply_s``), drained by N = 1, 2, 4 workers (``offload worker -c 4``, one
  process each, as on N hosts); units/s from the first enqueue to the last terminal row, and
  the scaling ratio N / 1.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from bench.cases import cost as case_cost, growth as case_growth, harness
from bench.probes import worker_probe
from bench.cases.fanout import REPO_ROOT, ServerProcess
from bench.cases.ledger_fill import _row, dead_pid
from bench.report.stats import check, headline, median, spread, to_us
from offload.ledger import sqlite_rows

WORKER_CONCURRENCY = 4
# Each side of the per-delegation pair runs this many delegations before its clock starts: the
# ledger is made (PostgreSQL's migration, ~40 ms, SQLite's ~2 ms) and the pool's connections
# are open, as in a runtime that has been up for a while.
WARMUP = 50


def dsn() -> str | None:
    return (os.environ.get("OFFLOAD_BENCH_POSTGRES_DSN") or os.environ.get("OFFLOAD_TEST_POSTGRES_DSN") or "").strip() or None


SETTINGS = ("fsync", "synchronous_commit", "server_version")


def server_settings(base: str) -> dict[str, str]:
    """The server settings a reader needs to compare case 5 with SQLite (which syncs every
    commit): fsync and synchronous_commit as the bench's connections see them."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SETTINGS}


class Schema:
    """A fresh schema on the bench server; ``url`` points a ledger at it."""

    def __init__(self, base: str) -> None:
        import psycopg

        self.base, self.name = base, f"bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {self.name}")
        self.url = f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={self.name}')}"

    def drop(self) -> None:
        import psycopg

        harness.reset_engine()  # close this process's pools first
        for attempt in range(5):
            try:
                with psycopg.connect(self.base, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
                return
            except psycopg.errors.DeadlockDetected:
                # A statement still finishing in the schema (a burst's last completion) met the
                # DROP's locks and the server chose the DROP as the victim: it ends, then retry.
                if attempt == 4:
                    raise
                time.sleep(0.5)


def _on(url: str | None) -> None:
    """Point the engine at ``url`` (None: the home's state.db); the runtime on the previous
    ledger is closed, so no connection of it is left in a schema about to be dropped."""
    harness.reset_engine()
    harness.close_runtime()
    if url is None:
        os.environ.pop("OFFLOAD_LEDGER_URL", None)
    else:
        os.environ["OFFLOAD_LEDGER_URL"] = url


def _cost_pair(base: str, n: int, root: Path) -> dict[str, float]:
    schema = Schema(base)
    try:
        _on(None)
        sqlite = case_cost.run_offload(n, root, warmup=WARMUP).figures(n)
        _on(schema.url)
        pg = case_cost.run_offload(n, root, warmup=WARMUP).figures(n)
    finally:
        _on(None)
        schema.drop()
    return {"sqlite_wall_per_delegation_us": sqlite["wall_per_delegation_us"],
            "pg_wall_per_delegation_us": pg["wall_per_delegation_us"],
            "pg_dispatch_p50_us": pg["dispatch_p50_us"]}


def _filled(base: str, rows: int) -> Schema:
    """A schema whose ledger holds ``rows`` delivered rows (the ledger makes its tables)."""
    from offload.ledger import open_ledger

    import psycopg

    schema = Schema(base)
    ledger = open_ledger(schema.url)
    try:
        ledger._run(lambda conn: None, create=True)  # the ledger makes (and owns) its tables
    finally:
        ledger.close()
    if rows:
        pid, now = dead_pid(), time.time()
        columns = ", ".join(sqlite_rows._UPSERT_COLUMNS)  # the same row shape as case 3's SQLite fill
        with psycopg.connect(schema.url, autocommit=True) as conn, conn.cursor() as cur:
            with cur.copy(f"COPY async_delegations ({columns}) FROM STDIN") as copy:
                for i in range(rows):
                    copy.write_row(_row(i, now, "delivered", pid))
            cur.execute("ANALYZE async_delegations")
    return schema


def _growth_pair(base: str, rows: int, burst: int, root: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    for name, count in (("empty", 0), ("full", rows)):
        schema = _filled(base, count)
        try:
            _on(schema.url)
            home = Path(tempfile.mkdtemp(prefix=f"pg-{name}-", dir=root))
            latencies = case_growth._dispatch_burst(home, burst)
            figures[f"pg_dispatch_p50_us_{name}"] = to_us(median(latencies))
        finally:
            _on(None)
            schema.drop()
    return figures


def model_server(reply_s: float, root: Path) -> ServerProcess:
    """The loopback model server, each reply taking ``reply_s``: a streamed reply is 5 chunks
    (role, 2 of text, finish, usage) with 4 equal gaps between them."""
    return ServerProcess(2, reply_s / 4, root / "model-server.log")


def queue_and_drain(url: str, units: int, who: str) -> float:
    """Queue ``units`` one-subagent units in the ledger at ``url`` and wait until every one has
    a terminal row; the seconds from the first enqueue to the last terminal row."""
    import psycopg

    from offload.ledger import DispatchRow, open_ledger
    from offload.origin import Origin
    from offload.subagents import tool as dt
    from offload.subagents.config import DelegationConfig
    from offload.subagents.queue import unit_spec

    ledger = open_ledger(url, host_id="bench-parent")
    origin = Origin(session_key="bench:session")
    started = time.perf_counter()
    for i in range(units):
        unit = dt.Batch(tasks=[dt.TaskArgs(goal=f"bench unit number {i}")], children=[], parent=None,
                        cfg=DelegationConfig(), creds={"model": "bench-model"}, indexes=[0])
        ledger.enqueue_unit(DispatchRow.of(f"deleg_b{i:06d}", origin, time.time(), unit_spec(unit, origin)),
                            time.time())
    with psycopg.connect(url, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM async_delegations WHERE state NOT IN ('queued', 'running')"
                           ).fetchone()[0] < units:
            if time.perf_counter() - started > 300:
                raise RuntimeError(f"{who} did not drain {units} units in 300 s")
            time.sleep(0.02)
    elapsed = time.perf_counter() - started
    ledger.close()
    return elapsed


def start_worker(url: str, server_url: str, home: Path, host_id: str, argv: list[str] | None = None,
                 count_file: Path | None = None) -> subprocess.Popen:
    """An ``offload worker -c WORKER_CONCURRENCY`` process (or ``argv``) on ``url``, listening;
    with ``count_file`` it counts its round trips there (``bench.probes.worker_probe``)."""
    (home / "config.yaml").write_text(f"model: bench-model\nbase_url: {server_url}\n"
                                      "delegation:\n  max_concurrent_children: 256\n")
    env = {**os.environ, "HERMES_HOME": str(home), "OFFLOAD_LEDGER_URL": url, "OFFLOAD_HOST_ID": host_id,
           "PYTHONPATH": str(REPO_ROOT)}
    module = "offload"
    if count_file is not None:
        env[worker_probe.COUNT_FILE_ENV], module = str(worker_probe.new_count_file(count_file)), "bench.probes.worker_probe"
    argv = argv or [sys.executable, "-m", module, "worker", "-c", str(WORKER_CONCURRENCY)]
    proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    proc.stdout.readline()  # "offload worker on ..." once it listens
    return proc


def _workers_run(base: str, n_workers: int, units: int, server_url: str, root: Path) -> dict[str, float]:
    """Units/s through ``n_workers`` worker processes draining ``units`` queued units; with one
    worker also its CPU ms and round trips per unit (from before the first enqueue to after
    the last terminal row: /proc and ``bench.probes.worker_probe``'s counter)."""
    schema = _filled(base, 0)  # the tables exist: a worker's first claim does not make them within the figures
    procs: list[subprocess.Popen] = []
    count_file = root / f"round-trips-{schema.name}" if n_workers == 1 else None
    try:
        for k in range(n_workers):
            home = Path(tempfile.mkdtemp(prefix=f"worker{k}-", dir=root))
            procs.append(start_worker(schema.url, server_url, home, f"bench-worker-{k}", count_file=count_file))
        cpu_s, trips = worker_probe.process_cpu_s(procs[0].pid), count_file and worker_probe.read_count(count_file)
        figures = {f"units_per_s_{n_workers}": units / queue_and_drain(schema.url, units, f"{n_workers} workers")}
        if count_file is not None:
            figures["worker_cpu_ms_per_unit"] = (worker_probe.process_cpu_s(procs[0].pid) - cpu_s) * 1000 / units
            figures["worker_round_trips_per_unit"] = (worker_probe.read_count(count_file) - trips) / units
        return figures
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        schema.drop()


def run(n: int, rows: int, burst: int, units: int, reply_s: float, rounds: int, root: Path,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    base = dsn()
    if base is None:
        return {"case": 5, "title": "PostgreSQL ledger", "metrics": {}, "headlines": [],
                "skipped": "no PostgreSQL: set OFFLOAD_BENCH_POSTGRES_DSN or run `eval \"$(.ci/postgres-up)\"`"}
    settings = server_settings(base)
    if settings["fsync"] != "on" or settings["synchronous_commit"] != "on":
        log(f"  case 5: the server runs with fsync={settings['fsync']}, synchronous_commit="
            f"{settings['synchronous_commit']}: PostgreSQL is flattered against SQLite, which syncs every commit "
            "(`eval \"$(.ci/postgres-bench-up)\"` starts one with both on)")
    server = model_server(reply_s, root)
    per_round: list[dict[str, float]] = []
    try:
        for r in range(rounds):
            figures = {**_cost_pair(base, n, root), **_growth_pair(base, rows, burst, root)}
            for n_workers in (1, 2, 4):
                figures.update(_workers_run(base, n_workers, units, server.url, root))
            per_round.append(figures)
            log(f"  case 5 round {r + 1}/{rounds}: {figures['pg_wall_per_delegation_us']:.0f} us/deleg on PostgreSQL "
                f"({figures['sqlite_wall_per_delegation_us']:.0f} on SQLite); workers "
                + ", ".join(f"{k}: {figures[f'units_per_s_{k}']:.0f}/s" for k in (1, 2, 4))
                + f"; one worker {figures['worker_cpu_ms_per_unit']:.1f} ms CPU, "
                  f"{figures['worker_round_trips_per_unit']:.1f} round trips per unit")
    finally:
        server.close()
    return summarize(n, rows, burst, units, reply_s, rounds, per_round, settings)


def summarize(n: int, rows: int, burst: int, units: int, reply_s: float, rounds: int,
              per_round: list[dict[str, float]], settings: dict[str, str] | None = None) -> dict[str, Any]:
    s = lambda key: [figures[key] for figures in per_round]  # noqa: E731
    heads = [
        headline("1. per-delegation wall: PostgreSQL / SQLite", s("pg_wall_per_delegation_us"),
                 s("sqlite_wall_per_delegation_us"), target_max=1.5, target="<= 1.5"),
        headline(f"3. dispatch p50 on PostgreSQL: {rows:,} rows / empty", s("pg_dispatch_p50_us_full"),
                 s("pg_dispatch_p50_us_empty"), target_max=1.2, target="<= 1.2"),
        headline("workers: units/s, 2 workers / 1", s("units_per_s_2"), s("units_per_s_1"), target_max=None,
                 target="(info; ideal 2)"),
        headline("workers: units/s, 4 workers / 1", s("units_per_s_4"), s("units_per_s_1"), target_max=None,
                 target="(info; ideal 4)"),
        check("one worker: CPU per unit (its process, the child's agent turn included)",
              s("worker_cpu_ms_per_unit"), unit="ms", target_max=4.0, target="<= 4 ms"),
        check("one worker: round trips to PostgreSQL per unit", s("worker_round_trips_per_unit"),
              unit="round trips", target_max=6.0, target="<= 6"),
    ]
    return {"case": 5, "title": "PostgreSQL ledger",
            "params": {"n": n, "rows": rows, "burst": burst, "units": units, "reply_s": reply_s,
                       "worker_concurrency": WORKER_CONCURRENCY, "rounds": rounds, "server": settings or {}},
            "metrics": {key: spread(s(key)) for key in per_round[0]}, "headlines": heads, "skipped": None}
