"""``python -m bench``: run the benchmark cases in one process and report ratios.

``--quick`` is the CI smoke run (small N, 3 rounds, under a minute); the full run (the
default: N = 2,000, 1,000 live units, 100,000 ledger rows, 50 children, 5 rounds) writes
``bench/results/latest.json``. Exit status 1 if a case failed to run (a missed target is a
figure to report, not a failure).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from bench.cases import cost as case_cost, fanout as case_fanout, growth as case_growth, postgres as case_postgres, resume as case_resume, sandbox as case_sandbox, scale as case_scale, steps as case_steps
import bench.report.output as report

RESULTS_DIR = Path(__file__).resolve().parent / "results"
FULL = {"cost_n": 2000, "scale": (100, 1000), "rows": 100_000, "replay": (1000, 10_000), "burst": 300,
        "fanout": (50, 20, 0.1), "rounds": 5, "postgres": (2000, 100_000, 300, 200, 0.2), "postgres_rounds": 5,
        "sandbox_n": 200, "steps": (20, 20), "resume": True}
QUICK = {"cost_n": 200, "scale": (10, 100), "rows": 2000, "replay": (100, 1000), "burst": 50,
         "fanout": (5, 5, 0.1), "rounds": 3, "postgres": (100, 2000, 50, 24, 0.1), "postgres_rounds": 1,
         "sandbox_n": 20, "steps": (2, 5), "resume": False}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description="offload's benchmark (issue #4)")
    parser.add_argument("--quick", action="store_true", help="CI smoke run: small N, 3 rounds")
    parser.add_argument("--rounds", type=int, help="rounds per case (default 5, quick 3; the spec asks >= 5)")
    parser.add_argument("--json", type=Path, help="where to write the figures (default bench/results/latest.json; "
                        "quick: bench/results/quick.json)")
    parser.add_argument("--cases", default="1,2,3,4,5,6,7,8", help="comma-separated case numbers (default 1,2,3,4,5,6,7,8; "
                        "5 = PostgreSQL, skipped without OFFLOAD_BENCH_POSTGRES_DSN / OFFLOAD_TEST_POSTGRES_DSN; "
                        "6 = the sandbox's cost per command, skipped where no sandbox can run; "
                        "7 = the step log's cost per child step against DBOS, its DBOS side skipped without dbos; "
                        "8 = resume latency, full run only)")
    parser.add_argument("--workdir", type=Path, help="where temp homes go (default: the system temp dir)")
    args = parser.parse_args(argv)
    try:
        args.case_numbers = sorted({int(c) for c in args.cases.split(",") if c.strip()})
    except ValueError:
        parser.error(f"--cases takes numbers like 1,3; got {args.cases!r}")
    if not set(args.case_numbers) <= {1, 2, 3, 4, 5, 6, 7, 8}:
        parser.error(f"--cases: choose among 1,2,3,4,5,6,7,8; got {args.cases!r}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def case_plan(params: dict[str, Any], rounds: int, root: Path, log: Callable[[str], None]) -> dict[int, Callable]:
    # Case 5 starts worker processes each round: its own round count unless --rounds says otherwise.
    pg_rounds = params["postgres_rounds"] if rounds == params["rounds"] else rounds
    return {
        1: lambda: case_cost.run(params["cost_n"], rounds, root, log=log),
        2: lambda: case_scale.run(*params["scale"], rounds, root, log=log),
        3: lambda: case_growth.run(params["rows"], *params["replay"], rounds, root, burst=params["burst"], log=log),
        4: lambda: case_fanout.run(*params["fanout"], rounds, root, log=log),
        5: lambda: case_postgres.run(*params["postgres"], pg_rounds, root, log=log),
        6: lambda: case_sandbox.run(params["sandbox_n"], rounds, root, log=log),
        7: lambda: case_steps.run(*params["steps"], rounds, root, log=log),
        8: lambda: case_resume.run(rounds, root, log=log) if params["resume"] else case_resume.not_quick(),
    }


def run_cases(args: argparse.Namespace, root: Path, log: Callable[[str], None]) -> dict[str, Any]:
    params = QUICK if args.quick else FULL
    rounds = args.rounds or params["rounds"]
    plan = case_plan(params, rounds, root, log)
    cases: dict[str, Any] = {}
    for number in args.case_numbers:
        log(f"case {number} ...")
        started = time.perf_counter()
        try:
            cases[str(number)] = plan[number]()
        except Exception as exc:  # report it, run the other cases, exit non-zero
            traceback.print_exc()
            cases[str(number)] = {"case": number, "title": f"case {number}", "metrics": {}, "headlines": [],
                                  "skipped": None, "error": f"{type(exc).__name__}: {exc}"}
        cases[str(number)]["wall_s"] = time.perf_counter() - started
    return cases


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.json or RESULTS_DIR / ("quick.json" if args.quick else "latest.json")
    saved_home = os.environ.get("HERMES_HOME")
    load_before = report.load_average()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="offload-bench-", dir=args.workdir) as tmp:
        try:
            cases = run_cases(args, Path(tmp), log=lambda line: print(line, flush=True))
        finally:
            if saved_home is None:
                os.environ.pop("HERMES_HOME", None)
            else:
                os.environ["HERMES_HOME"] = saved_home
    payload = {"schema": 1, "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
               "quick": args.quick, "machine": report.machine_info(), "total_wall_s": time.perf_counter() - started,
               "load_average_1m": {"before": load_before, "after": report.load_average()},
               "cases": cases}
    report.write_json(out, payload)
    report.render(payload)
    print(f"figures written to {out}")
    return 1 if any(case.get("error") for case in cases.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
