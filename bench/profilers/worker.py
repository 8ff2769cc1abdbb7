"""Where one ``offload worker`` spends CPU per unit: ``python -m bench.profilers.worker``.

Needs the PostgreSQL server case 5 uses (``eval "$(.ci/postgres-up)"``). One worker process
(``-c 4``, as in case 5) drains ``--units`` queued one-subagent units against the loopback
model server. Its CPU per unit is the user + system time of the process (all threads, read
from /proc before the first enqueue and after the last terminal row) divided by the units.

With ``py-spy`` on PATH (``pip install py-spy``; a profiling tool, not a dependency) the same
drain is sampled on every thread, idle threads left out, and the functions with the most
samples are printed, own and inclusive, as ms of CPU per unit. A sampler, not cProfile: the
units run on pool threads, and cProfile's per-call overhead inflates the many small calls of
psycopg and httpx tenfold (it put 7 ms per unit in building an HTTP client that costs 0.1).
"""
from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from bench.cases.postgres import Schema, dsn, model_server, queue_and_drain, start_worker
from bench.probes.worker_probe import process_cpu_s


def drain_once(base: str, units: int, root: Path, reply_s: float, samples_to: Path | None) -> tuple[float, float]:
    """(wall seconds, worker CPU seconds) of one worker draining ``units`` units; sampled by
    py-spy into ``samples_to`` (collapsed stacks) if given."""
    schema = Schema(base)
    server = model_server(reply_s, root)
    proc = start_worker(schema.url, server.url, Path(tempfile.mkdtemp(prefix="worker-", dir=root)), "bench-worker")
    spy = None
    if samples_to is not None:
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(proc.pid), "--format", "raw", "--rate", "500", "--gil",
                                "--output", str(samples_to)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cpu_before = process_cpu_s(proc.pid)
        wall_s = queue_and_drain(schema.url, units, "the worker")
        return wall_s, process_cpu_s(proc.pid) - cpu_before
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its samples when interrupted
            spy.wait(timeout=60)
        proc.send_signal(signal.SIGTERM)  # drains (nothing left) and exits
        proc.wait(timeout=60)
        server.close()
        schema.drop()


def top_functions(samples: Path, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """(samples, the ``top`` functions by own samples, by inclusive samples) of a raw py-spy file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in samples.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = [f.split(" (")[0] + " " + f.rsplit("/", 1)[-1].split(":")[0].rstrip(")") for f in stack.split(";")]
        n = int(count)
        total += n
        own[frames[-1]] += n
        for frame in set(frames[1:]):  # the first frame is the thread
            inclusive[frame] += n
    return total, own.most_common(top), inclusive.most_common(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=200)
    parser.add_argument("--reply-s", type=float, default=0.2)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    base = dsn()
    if base is None:
        raise SystemExit("no PostgreSQL: run `eval \"$(.ci/postgres-up)\"` first")
    root = Path(tempfile.mkdtemp(prefix="offload-profile-worker-"))
    wall_s, cpu_s = drain_once(base, args.units, root, args.reply_s, None)
    per_unit_ms = cpu_s / args.units * 1000
    print(f"{args.units} units in {wall_s:.2f} s ({args.units / wall_s:.1f} units/s); worker CPU {cpu_s:.2f} s = "
          f"{per_unit_ms:.1f} ms per unit")
    if shutil.which("py-spy") is None:
        print("(no py-spy on PATH: `pip install py-spy` for where the CPU goes)")
        return
    samples = root / "worker.samples"
    drain_once(base, args.units, root, args.reply_s, samples)
    total, own, inclusive = top_functions(samples, args.top)
    for title, rows in (("own", own), ("inclusive", inclusive)):
        print(f"\n{title}: share of {total} samples, ms of CPU per unit at {per_unit_ms:.1f} ms")
        for name, n in rows:
            print(f"  {n / total:6.1%} {n / total * per_unit_ms:6.2f} ms  {name}")


if __name__ == "__main__":
    main()
