"""Case 6 — the sandbox's cost per command (issue 40): ``run_command`` through the real tool
path, ``terminal.sandbox: auto`` (bubblewrap, its namespaces, cgroups and rlimits) against
``none``, interleaved in the same round so both see the same machine. Two commands: ``true``
(the floor) and a short script (a loop writing a file, a pipe, ``wc``).

Per round: p50 and p99 of each (command, mode) over ``n`` runs; the headline is the p50 added
by the sandbox, target at most 15 ms. Beside it, the floor: the same bwrap command line started
bare (``subprocess.run``, no tool around it) against ``/bin/sh -c true``, which is what the
kernel's namespaces cost on this machine whatever offload does.
Skipped, with the reason, where no sandbox can run.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench.report.stats import check, percentile, spread

COMMANDS = {"true": "true", "script": "for i in 1 2 3 4 5; do echo line $i; done > out.txt; cat out.txt | wc -l"}
MODES = ("none", "auto")
TARGET_ADDED_P50_MS = 15.0


def _one_round(n: int, root: Path) -> dict[str, float]:
    from offload.toolsets.terminal_tool import run_command_handler
    from offload.toolsets.toolspec import ToolContext

    workspace = Path(tempfile.mkdtemp(prefix="sandbox-", dir=root))
    contexts = {mode: ToolContext(workspace=workspace, settings={"terminal": {"sandbox": mode}}) for mode in MODES}
    samples: dict[tuple[str, str], list[float]] = {(c, m): [] for c in COMMANDS for m in MODES}
    for _ in range(n):
        for name, command in COMMANDS.items():
            for mode in MODES:  # interleaved: a noisy second hits both modes alike
                started = time.perf_counter()
                result = run_command_handler({"command": command}, contexts[mode])
                samples[(name, mode)].append((time.perf_counter() - started) * 1000.0)
                if not result.startswith("exit code: 0"):
                    raise RuntimeError(f"{name} under {mode} failed: {result}")
    figures: dict[str, float] = _floor(n, workspace)
    for (name, mode), values in samples.items():
        figures[f"{name}_{mode}_p50_ms"] = percentile(values, 50.0)
        figures[f"{name}_{mode}_p99_ms"] = percentile(values, 99.0)
    for name in COMMANDS:
        figures[f"{name}_added_p50_ms"] = figures[f"{name}_auto_p50_ms"] - figures[f"{name}_none_p50_ms"]
    return figures


def _floor(n: int, workspace: Path) -> dict[str, float]:
    import subprocess

    from offload.toolsets.terminal_sandbox import TerminalConfig, launch

    how = launch(TerminalConfig(), workspace=workspace, cwd=str(workspace), offload_home=None, tool="bench")
    bare: dict[str, list[float]] = {"sh": [], "bwrap": []}
    for _ in range(n):
        for name, prefix in (("sh", []), ("bwrap", how.argv)):
            started = time.perf_counter()
            subprocess.run([*prefix, "/bin/sh", "-c", "true"], env=how.env, check=True)
            bare[name].append((time.perf_counter() - started) * 1000.0)
    return {"floor_sh_p50_ms": percentile(bare["sh"], 50.0), "floor_bwrap_p50_ms": percentile(bare["bwrap"], 50.0)}


def run(n: int, rounds: int, root: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    from offload.toolsets.sandbox_limits import limits_in_force
    from offload.toolsets.terminal_sandbox import TerminalConfig, no_sandbox_reason

    defaults = TerminalConfig()
    params = {"commands_per_mode": n, "rounds": rounds,
              "limits": limits_in_force(defaults.max_processes, defaults.max_memory_mb)}
    reason = no_sandbox_reason()
    if reason is not None:
        log(f"  case 6 skipped: {reason}")
        return {"case": 6, "title": "sandbox cost per command", "params": params, "metrics": {}, "headlines": [],
                "skipped": reason}
    per_round = []
    for r in range(rounds):
        per_round.append(_one_round(n, root))
        f = per_round[-1]
        log(f"  case 6 round {r + 1}/{rounds}: true {f['true_none_p50_ms']:.1f} -> {f['true_auto_p50_ms']:.1f} ms, "
            f"script {f['script_none_p50_ms']:.1f} -> {f['script_auto_p50_ms']:.1f} ms (p50)")
    metrics = {key: spread([f[key] for f in per_round]) for key in per_round[0]}
    heads = [check(f"sandbox added p50, {name}", [f[f"{name}_added_p50_ms"] for f in per_round], unit="ms",
                   target_max=TARGET_ADDED_P50_MS, target=f"<= {TARGET_ADDED_P50_MS:g} ms added per command",
                   note="run_command sandboxed (auto) minus unsandboxed (none), same round")
             for name in COMMANDS]
    return {"case": 6, "title": "sandbox cost per command", "params": params, "metrics": metrics,
            "headlines": heads, "skipped": None}
