"""Case 3 — ledger growth: does a big ledger slow the hot path or replay?

Dispatch: the same burst of dispatches (runners held until the burst ends, so no finalize —
and no prune — runs inside the timed window) into an empty ledger and into one that already
holds ``rows`` delivered terminal rows, every round, fresh copies of both. Headline: median
dispatch latency full / empty.

Replay: ``process_registry.restore_completions()`` over ledgers of ``replay_small`` and
``replay_large`` pending rows left by a dead process. Headline: time large / small, which is
the row ratio when replay is linear.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench.cases import harness
from bench.cases.scale import LiveUnits
from bench.cases.ledger_fill import fill
from bench.report.stats import headline, median, percentile, spread, to_ms, to_us

DISPATCH_BURST = 300  # dispatches timed per ledger per round


def _dispatch_burst(home: Path, burst: int) -> list[float]:
    harness.use_home(home)
    harness.reset_engine()
    units = LiveUnits(cap=burst)
    latencies = units.dispatch(burst)
    received = units.release_and_wait()
    if received != burst:
        raise RuntimeError(f"only {received} of {burst} dispatched units reported")
    harness.reset_engine()
    return latencies


def _fresh_home(root: Path, name: str, template: Path | None) -> Path:
    home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    if template is None:
        harness.make_wal_db(home / "state.db")
    else:
        shutil.copyfile(template, home / "state.db")  # WAL mode is kept in the file header
    return home


def _replay(home: Path) -> tuple[float, int]:
    bus = harness.use_home(home).bus  # a new runtime: replay opens the file as a new process would
    start = time.perf_counter()
    offered = bus.restore_completions()
    elapsed = time.perf_counter() - start
    drained = harness.drain_queue()
    return elapsed, min(offered, drained)


def _templates(root: Path, rows: int, replay_small: int, replay_large: int) -> dict[str, Path]:
    made = {}
    for name, count, state in (("full", rows, "delivered"), ("replay_small", replay_small, "pending"),
                               ("replay_large", replay_large, "pending")):
        made[name] = fill(harness.make_wal_db(Path(tempfile.mkdtemp(prefix=f"tpl-{name}-", dir=root)) / "state.db"),
                          count, delivery_state=state)
    return made


def run(rows: int, replay_small: int, replay_large: int, rounds: int, root: Path, burst: int = DISPATCH_BURST,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    started = time.perf_counter()
    templates = _templates(root, rows, replay_small, replay_large)
    log(f"  case 3: ledgers filled in {time.perf_counter() - started:.1f} s")
    replay_homes = {k: _fresh_home(root, k, templates[k]) for k in ("replay_small", "replay_large")}
    per_round: list[dict[str, float]] = []
    for r in range(rounds):
        homes = [("empty", _fresh_home(root, "empty", None)), ("full", _fresh_home(root, "full", templates["full"]))]
        figures: dict[str, float] = {}
        for name, home in homes if r % 2 == 0 else homes[::-1]:
            latencies = _dispatch_burst(home, burst)
            figures[f"dispatch_p50_us_{name}"] = to_us(median(latencies))
            figures[f"dispatch_p99_us_{name}"] = to_us(percentile(latencies, 99))
            shutil.rmtree(home, ignore_errors=True)
        for name, home in replay_homes.items():
            elapsed, offered = _replay(home)
            figures[f"{name}_ms"], figures[f"{name}_rows"] = to_ms(elapsed), float(offered)
        per_round.append(figures)
        log(f"  case 3 round {r + 1}/{rounds}: dispatch p50 {figures['dispatch_p50_us_empty']:.0f} us empty, "
            f"{figures['dispatch_p50_us_full']:.0f} us full; replay {figures['replay_large_ms']:.0f} ms")
    return summarize(rows, replay_small, replay_large, rounds, burst, per_round)


def summarize(rows: int, replay_small: int, replay_large: int, rounds: int, burst: int,
              per_round: list[dict[str, float]]) -> dict[str, Any]:
    series = lambda key: [figures[key] for figures in per_round]  # noqa: E731
    growth = replay_large / replay_small
    heads = [
        headline(f"dispatch p50: {rows:,} rows / empty ledger", series("dispatch_p50_us_full"),
                 series("dispatch_p50_us_empty"), target_max=1.2, target="<= 1.2"),
        headline(f"dispatch p99: {rows:,} rows / empty ledger", series("dispatch_p99_us_full"),
                 series("dispatch_p99_us_empty"), target_max=None, target="(info)"),
        headline(f"replay: {replay_large:,} rows / {replay_small:,} rows", series("replay_large_ms"),
                 series("replay_small_ms"), target_max=1.2 * growth,
                 target=f"<= {1.2 * growth:.0f} (linear = {growth:.0f})"),
    ]
    return {"case": 3, "title": "ledger growth",
            "params": {"rows": rows, "replay_small": replay_small, "replay_large": replay_large,
                       "dispatch_burst": burst, "rounds": rounds},
            "metrics": {key: spread(series(key)) for key in per_round[0]}, "headlines": heads, "skipped": None}
