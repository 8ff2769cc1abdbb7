"""Case 7 — the step log's cost per child step (issue 44): one background child at a time, each
of ``steps`` steps (a model call asking for one side-effecting tool call, then the call), on
offload's own agent loop against an in-process scripted model (``bench.cases.step_loop``).

Side by side in each round, the order rotating:

- ``offload_never``: the child run as a background unit on offload's engine (its ledger row
  dispatched and completed) with no step log, as ``delegation.resume: never`` runs it;
- ``offload_log``: the same with the step log (``delegation.resume: auto``): per step the reply
  with the tool call's start mark (one fenced ledger write) and the call's result (another),
  and the log dropped once the unit's result is recorded;
- ``dbos_bare`` / ``dbos_steps``: the same loop as a DBOS workflow on a SQLite system database,
  without steps and with each model call and each tool call a DBOS step (``bench.cases.dbos_rig``);
  skipped with a note when dbos is not installed (it is in the bench extra only);
- ``pg_never`` / ``pg_log``: offload's pair with the ledger in PostgreSQL (a fresh schema),
  when ``OFFLOAD_BENCH_POSTGRES_DSN`` / ``OFFLOAD_TEST_POSTGRES_DSN`` names a server.

A step's cost is the difference over its container run without steps, per step: offload's
(``offload_log`` - ``offload_never``), DBOS's (``dbos_steps`` - ``dbos_bare``), wall and process CPU
(every thread: the ledger's writer, DBOS's own). Durability is the same on both SQLite sides:
WAL, ``synchronous`` FULL (read back from each side's own connection into the params).
"""
from __future__ import annotations

import functools
import queue
import time
from pathlib import Path
from typing import Any, Callable

from bench.cases import postgres as case_postgres, dbos_rig, harness, step_loop
from bench.report.stats import headline, spread, to_us
from offload.agent.step_log import StepLog
from offload.engine.units import UnitSpec

OFFLOAD = ("offload_never", "offload_log")
DBOS = ("dbos_bare", "dbos_steps")
POSTGRES = ("pg_never", "pg_log")


def _run_units(children: int, steps: int, root: Path, log: bool) -> tuple[float, float]:
    """``children`` background units run one after another on the current home's engine; the
    wall and CPU seconds from the first dispatch to the last completion event. One untimed unit
    first (the ledger made, its connections open)."""
    engine, bus = harness.runtime().engine, harness.runtime().bus.completion_queue
    step_loop.register()

    def one(index: int) -> None:
        did = engine.new_id()
        writer = StepLog(write_many=functools.partial(engine.record_steps, did, 0)) if log else None  # as a child's
        spec = UnitSpec(f"u{index}", role="leaf", model="bench-model", origin=harness.BENCH_ORIGIN, delegation_id=did,
                        durable={"bench": "case 7"} if log else None)
        handle = engine.dispatch(spec, lambda: step_loop.run_child(steps, root, writer), children + 2)
        if handle["status"] != "dispatched":
            raise RuntimeError(f"offload refused the bench unit: {handle.get('error')}")
        evt = bus.get(timeout=120)
        if evt.get("delegation_id") != did or evt.get("status") != "completed":
            raise RuntimeError(f"the bench unit did not complete: {evt.get('status')} {evt.get('error')}")
    one(children)
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(children):
        one(i)
    return time.perf_counter() - t0, time.process_time() - cpu0


def _offload(name: str, children: int, steps: int, root: Path) -> tuple[float, float]:
    harness.reset_engine()
    harness.new_home(root, name)
    try:
        return _run_units(children, steps, root, log=name.endswith("_log"))
    finally:
        harness.reset_engine()


def _dbos(stepped: bool, children: int, steps: int, root: Path) -> tuple[float, float]:
    rig = dbos_rig.DbosRig(harness.new_home(root, "dbos"))
    try:
        rig.run(stepped, steps, root)  # untimed: the tables made, the connections open
        cpu0, t0 = time.process_time(), time.perf_counter()
        for _ in range(children):
            rig.run(stepped, steps, root)
        figures = time.perf_counter() - t0, time.process_time() - cpu0
        expected = (children + 1) * (2 * steps + 1) if stepped else 0
        if stepped and rig.operations() < expected:
            raise RuntimeError(f"DBOS recorded {rig.operations()} step outputs, expected {expected}")
        return figures
    finally:
        rig.close()


def _postgres(base: str, children: int, steps: int, root: Path) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for name in POSTGRES:
        schema = case_postgres.Schema(base)
        try:
            case_postgres._on(schema.url)
            out[name] = _offload(name, children, steps, root)
        finally:
            case_postgres._on(None)
            schema.drop()
    return out


def sqlite_pragmas(root: Path) -> dict[str, Any]:
    """journal_mode and synchronous as offload's ledger connection sees them."""
    harness.new_home(root, "pragmas")
    ledger = harness.runtime().ledger()
    ledger._side_read("SELECT 1", ())  # opens the connection the ledger writes through
    return {name: ledger._side_read(f"PRAGMA {name}", ())[0][0] for name in ("journal_mode", "synchronous")}


def _round(r: int, children: int, steps: int, root: Path, skip_dbos: str | None,
           pg: str | None) -> dict[str, tuple[float, float]]:
    runs: dict[str, Callable[[], tuple[float, float]]] = {
        name: functools.partial(_offload, name, children, steps, root) for name in OFFLOAD}
    if skip_dbos is None:
        runs.update(dbos_bare=functools.partial(_dbos, False, children, steps, root),
                    dbos_steps=functools.partial(_dbos, True, children, steps, root))
    order = list(runs)
    order = order[r % len(order):] + order[:r % len(order)]
    out = {name: runs[name]() for name in order}
    if pg is not None:
        out.update(_postgres(pg, children, steps, root))
    return out


def run(children: int, steps: int, rounds: int, root: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    skip_dbos, pg = dbos_rig.available(), case_postgres.dsn()
    params: dict[str, Any] = {"children": children, "steps": steps, "rounds": rounds,
                              "tool_output_bytes": step_loop.OUTPUT_BYTES, "offload_sqlite": sqlite_pragmas(root)}
    if skip_dbos is None:
        rig = dbos_rig.DbosRig(harness.new_home(root, "dbos-pragmas"))
        params["dbos_sqlite"] = rig.pragmas()
        rig.close()
    if pg is not None:
        params["postgres"] = case_postgres.server_settings(pg)
    notes = [n for n in (skip_dbos and f"DBOS side skipped: {skip_dbos}",
                         pg is None and "PostgreSQL side skipped: set OFFLOAD_BENCH_POSTGRES_DSN or "
                                        "OFFLOAD_TEST_POSTGRES_DSN") if n]
    per_round: list[dict[str, float]] = []
    for r in range(rounds):
        per_round.append(_figures(_round(r, children, steps, root, skip_dbos, pg), children * steps))
        log(f"  case 7 round {r + 1}/{rounds}: " + ", ".join(
            f"{k.removesuffix('_step_cost_us')} {v:.0f} us" for k, v in per_round[-1].items()
            if k.endswith("_step_cost_us")) + " per step (wall)")
    return summarize(params, per_round, notes)


def _figures(raw: dict[str, tuple[float, float]], total_steps: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for name, (wall_s, cpu_s) in raw.items():
        figures[f"{name}_wall_per_step_us"] = to_us(wall_s / total_steps)
        figures[f"{name}_cpu_per_step_us"] = to_us(cpu_s / total_steps)
    for side, (base, durable) in {"offload": OFFLOAD, "dbos": DBOS, "pg": POSTGRES}.items():
        if base in raw:
            for kind in ("wall", "cpu"):
                figures[f"{side}_{kind}_step_cost_us" if kind == "cpu" else f"{side}_step_cost_us"] = (
                    figures[f"{durable}_{kind}_per_step_us"] - figures[f"{base}_{kind}_per_step_us"])
    return figures


def summarize(params: dict[str, Any], per_round: list[dict[str, float]], notes: list[str]) -> dict[str, Any]:
    s = lambda key: [figures[key] for figures in per_round]  # noqa: E731
    have = per_round[0]
    heads = []
    if "dbos_step_cost_us" in have:
        heads += [headline("offload / DBOS: wall time a step's durability adds (SQLite)", s("offload_step_cost_us"),
                           s("dbos_step_cost_us"), target_max=1.0, target="<= 1"),
                  headline("offload / DBOS: CPU time a step's durability adds (SQLite)", s("offload_cpu_step_cost_us"),
                           s("dbos_cpu_step_cost_us"), target_max=1.0, target="<= 1")]
        if "pg_step_cost_us" in have:
            heads += [headline("offload on PostgreSQL / DBOS on SQLite: wall a step adds", s("pg_step_cost_us"),
                               s("dbos_step_cost_us"), target_max=1.0, target="<= 1 (see the server's fsync)"),
                      headline("offload on PostgreSQL / DBOS on SQLite: CPU a step adds", s("pg_cpu_step_cost_us"),
                               s("dbos_cpu_step_cost_us"), target_max=1.0, target="<= 1")]
    heads.append(headline("offload: wall per step, step log / no log (SQLite)", s("offload_log_wall_per_step_us"),
                          s("offload_never_wall_per_step_us"), target_max=None, target="(info)"))
    if "pg_step_cost_us" in have:
        heads.append(headline("offload: wall per step, step log / no log (PostgreSQL)", s("pg_log_wall_per_step_us"),
                              s("pg_never_wall_per_step_us"), target_max=None, target="(info)"))
    return {"case": 7, "title": "step log cost per child step", "params": params,
            "metrics": {key: spread(s(key)) for key in have}, "headlines": heads,
            "skipped": None, "notes": notes}
