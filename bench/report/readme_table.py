"""Markdown table of a benchmark run, for docs/benchmarks.md ("Latest figures"):
``python -m bench.report.readme_table [JSON]``.

Reads the JSON that ``python -m bench`` wrote (default ``bench/results/latest.json``) and
prints the headline ratios and absolute checks with their targets, then the machine line,
so the page's figures are copied from a run, never typed (the module keeps its name from when
the table was in the README).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DEFAULT_JSON = Path(__file__).resolve().parents[1] / "results" / "latest.json"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}×" if unit == "ratio" else f"{value:.2f} {unit}"


def _met(met: bool | None) -> str:
    return {True: "yes", False: "**no**"}.get(met, "–")


def table(payload: dict[str, Any]) -> str:
    lines = ["| case | figure | median | p95 | target | met |", "|---|---|---:|---:|---|:---:|"]
    for case in payload["cases"].values():
        label = f"{case['case']}. {case['title']}"
        if case.get("skipped") or case.get("error"):
            lines.append(f"| {label} | skipped: {case.get('skipped') or case.get('error')} | | | | |")
            continue
        for row in [*case["headlines"], *case.get("checks", [])]:
            unit = row.get("unit", "ratio")
            lines.append(f"| {label} | {row['name']} | {_fmt(row['median'], unit)} | {_fmt(row['p95'], unit)} "
                         f"| {row['target']} | {_met(row['met'])} |")
            label = ""
    return "\n".join(lines)


def machine_line(payload: dict[str, Any]) -> str:
    m = payload["machine"]
    return (f"Machine: {m['nproc']} cores ({m['cpu_model']}), Python {m['python']}, SQLite {m['sqlite']}, "
            f"huey {m['huey']}, {m['platform']}; commit {m['git_commit']}; the whole run took "
            f"{payload['total_wall_s']:.0f} s (1-minute load average {_load(payload)}). "
            f"Command: `{payload['command']}`.")


def _load(payload: dict[str, Any]) -> str:
    load = payload.get("load_average_1m") or {}
    return f"{load.get('before')} before, {load.get('after')} after"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", type=Path, default=DEFAULT_JSON)
    payload = json.loads(parser.parse_args().json.read_text(encoding="utf-8"))
    print(table(payload))
    print()
    print(machine_line(payload))


if __name__ == "__main__":
    main()
