"""Profile offload's per-delegation path with pyinstrument: ``python -m bench.profilers.cost``.

pyinstrument samples one thread, so the worker pool is swapped for an inline executor: each
dispatch runs its runner, finalize and completion write on the calling thread, and the whole
cost of a delegation (dispatch + worker + finalize + queue) shows up in one call tree.
Lock waits vanish this way; what remains is the CPU the engine spends per delegation.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path

from bench.cases import harness


class InlineExecutor:
    """Runs each job on the submitting thread (profiling only)."""

    def submit(self, fn) -> Future:
        future: Future = Future()
        future.set_result(fn())
        return future

    def ensure_workers(self, max_workers: int) -> None:
        pass

    def shutdown(self, wait: bool = False) -> None:
        pass


def run_inline(n: int, root: Path) -> float:
    """Dispatch and finalize ``n`` trivial delegations inline; returns seconds per delegation."""
    harness.reset_engine()
    harness.new_home(root, "profile")
    engine = harness.runtime().engine
    engine.executor = InlineExecutor()  # the engine reuses whatever pool is installed
    started = time.perf_counter()
    for i in range(n):
        harness.dispatch_unit(i, lambda: {"status": "completed", "summary": "ok"}, cap=n)
        harness.runtime().bus.completion_queue.get_nowait()
    elapsed = time.perf_counter() - started
    engine.executor = None
    harness.reset_engine()
    return elapsed / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="delegations to profile (default 2000)")
    parser.add_argument("--html", type=Path, help="also write pyinstrument's HTML report here")
    args = parser.parse_args()
    from pyinstrument import Profiler

    with tempfile.TemporaryDirectory(prefix="offload-profile-") as tmp:
        run_inline(100, Path(tmp))  # warm-up: imports, first connection
        profiler = Profiler(interval=0.0002)
        profiler.start()
        per_delegation_s = run_inline(args.n, Path(tmp))
        profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=False))
    print(f"{per_delegation_s * 1e6:.0f} us per delegation inline (profiler overhead included)")
    if args.html:
        args.html.write_text(profiler.output_html())


if __name__ == "__main__":
    main()
