"""The run's output: a rich table of the headline ratios and absolute checks, one table of raw
figures per case, and the same figures as JSON (NaN written as null), with the machine they
came from and the command that produced them.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def machine_info() -> dict[str, Any]:
    return {"nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu_model": _cpu_model(), "python": platform.python_version(),
            "platform": platform.platform(), "sqlite": sqlite3.sqlite_version,
            "huey": _version("huey"), "git_commit": _git_commit()}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _git_commit() -> str | None:
    commit = _git("rev-parse", "--short", "HEAD")
    changed = [line for line in _git("status", "--porcelain", "--untracked-files=no").splitlines()
               if "bench/results/" not in line]  # a previous run's figures are not code
    if commit and changed:
        commit += "-dirty"  # the figures came from uncommitted code
    return commit or None


def load_average() -> float | None:
    """1-minute load average: other work on a shared machine shows up here, not in the ratios."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(payload), indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "ratio":
        return f"{value:.2f}×"
    return f"{value:.2f} {unit}"


def _met(met: bool | None) -> str:
    return {True: "[green]yes[/]", False: "[red]NO[/]"}.get(met, "[dim]-[/]")


def headline_table(cases: list[dict[str, Any]]) -> Table:
    table = Table(title="offload benchmark: headline figures (median / p95 over rounds)")
    for column, justify in (("case", "left"), ("figure", "left"), ("median", "right"), ("p95", "right"),
                            ("target", "left"), ("met", "center")):
        table.add_column(column, justify=justify)
    for case in cases:
        label = f"{case['case']}. {case['title']}"
        if case.get("skipped") or case.get("error"):
            reason = escape(case["skipped"]) if case.get("skipped") else f"[red]error: {escape(case['error'])}[/]"
            table.add_row(label, f"skipped: {reason}" if case.get("skipped") else reason, "", "", "", "")
            continue
        for row in [*case["headlines"], *case.get("checks", [])]:
            unit = row.get("unit", "ratio")
            table.add_row(label, row["name"], _fmt(row["median"], unit), _fmt(row["p95"], unit), row["target"],
                          _met(row["met"]))
            label = ""
    return table


def metrics_table(case: dict[str, Any]) -> Table:
    table = Table(title=f"case {case['case']}: {case['title']} — raw figures {case.get('params', {})}")
    table.add_column("series")
    table.add_column("median", justify="right")
    table.add_column("p95", justify="right")
    for name, row in _flat_metrics(case["metrics"]):
        table.add_row(name, f"{row['median']:.2f}", f"{row['p95']:.2f}")
    return table


def _flat_metrics(metrics: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, float]]]:
    flat = []
    for name, row in metrics.items():
        if "median" in row:
            flat.append((prefix + name, row))
        else:
            flat.extend(_flat_metrics(row, f"{prefix}{name}."))
    return flat


def render(payload: dict[str, Any], console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:  # CI logs and pipes: do not squeeze the table into 80 columns
            console = Console(width=120)
    cases = list(payload["cases"].values())
    for case in cases:
        if case.get("metrics"):
            console.print(metrics_table(case))
    console.print(headline_table(cases))
    for case in cases:
        for note in case.get("notes") or []:  # a side of a case that could not run here, and why
            console.print(f"case {case['case']}: {note}", markup=False)  # "[bench]" is not a style
    machine = payload["machine"]
    console.print(f"machine: {machine['nproc']} cores, {machine['cpu_model']}, Python {machine['python']}, "
                  f"SQLite {machine['sqlite']}; load average {payload['load_average_1m']}; "
                  f"total {payload['total_wall_s']:.0f} s; command: {payload['command']}")
