"""Case 4 — fan-out against a model: ``children`` background children, each streaming a
scripted reply from the loopback fake OpenAI-compatible server for ~``chunks * delay`` s.

The server runs in its own process (``bench.probes.model_server_proc``), as a real model server
would, so the figures are the parent's: its wall time and its CPU. Per round, on one server:
the floor — one child run synchronously through the same ``delegate_task`` path, measured —
then one ``delegate_task(tasks=..., background=True)`` call, twice: as one completion unit
(the default) and as one unit per child (``delegation.independent_completions``). Each is
timed from the call to its last completion event, with process CPU time over that window.

The agent runtime and the model server are imported lazily: until both are in this checkout
the case reports itself skipped, with the reason.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from bench.cases import harness
from bench.report.stats import headline, spread

REPO_ROOT = Path(__file__).resolve().parents[2]
MODES = {"one_unit": False, "per_child_units": True}  # mode -> delegation.independent_completions


def _imports() -> Any:
    try:
        import offload
        from offload.agent.core import AIAgent
        from offload.testing import model_server
    except ImportError as exc:
        return f"the agent runtime or loopback model server is not available yet ({exc})"
    # An editable install of another checkout can serve a module this one lacks: refuse the mix.
    if Path(offload.__file__).resolve().parent not in Path(model_server.__file__).resolve().parents:
        return f"offload/testing/model_server.py is not in this checkout (found {model_server.__file__} instead)"
    return AIAgent


class ServerProcess:
    """``bench.probes.model_server_proc`` in a child process; its URL is read from its first line."""

    def __init__(self, chunks: int, delay_s: float, log_path: Path) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        # Its stderr goes to a file: http.server prints a traceback for every keep-alive
        # connection a client drops, which would bury the benchmark's own output.
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.probes.model_server_proc", "--chunks", str(chunks), "--delay", str(delay_s)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO_ROOT, env=env)
        self.url = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.close()
            raise RuntimeError(f"the model server process did not start (printed {self.url!r}; see {log_path})")

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()  # the server exits when its stdin closes
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _write_config(home: Path, children: int, independent: bool) -> None:
    cap = max(64, children + 1)  # 50 children must fit: tasks per call, and background slots
    (home / "config.yaml").write_text(f"delegation:\n  max_concurrent_children: {cap}\n"
                                      f"  independent_completions: {'true' if independent else 'false'}\n",
                                      encoding="utf-8")


def _await_events(count: int, timeout_s: float) -> list[dict]:
    events, deadline = [], time.monotonic() + timeout_s
    while len(events) < count and time.monotonic() < deadline:
        evt = harness.runtime().bus.completion_queue.get(timeout=max(0.1, deadline - time.monotonic()))
        if evt.get("type") == "async_delegation":
            events.append(evt)
    return events


def _fan_out(parent, home: Path, children: int, independent: bool, timeout_s: float) -> dict:
    _write_config(home, children, independent)
    delegate_task = harness.use_home(home).delegate_tool  # a runtime on the config just written
    tasks = [{"goal": f"child {i}"} for i in range(children)]
    cpu0, start = time.process_time(), time.perf_counter()
    handle = json.loads(delegate_task(tasks=tasks, background=True, parent_agent=parent))
    if handle.get("status") != "dispatched":
        raise RuntimeError(f"the fan-out was not dispatched in the background: {handle}")
    events = _await_events(children if independent else 1, timeout_s)
    wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu0
    results = [r for e in events for r in (e.get("results") or [])]
    done = sum(1 for r in results if r.get("status") == "completed")
    if done != children:
        raise RuntimeError(f"{done} of {children} children completed ({len(events)} events)")
    return {"wall_s": wall_s, "cpu_s_per_child": cpu_s / children}


def _one_round(AIAgent: Any, children: int, chunks: int, delay_s: float, root: Path) -> dict[str, float]:
    harness.reset_engine()
    home = harness.new_home(root, "fanout")
    _write_config(home, children, False)
    off = harness.use_home(home)  # its runtime reads the config just written
    server = ServerProcess(chunks, delay_s, root / "model_server.log")
    try:
        parent = AIAgent(model="bench-model", base_url=server.url, api_key="bench-key", toolsets=["delegation"],
                         provided_toolsets=off.toolsets())
        cpu0, start = time.process_time(), time.perf_counter()
        sync = json.loads(off.delegate_tool(goal="floor child", background=False, parent_agent=parent))
        figures = {"floor_wall_s": time.perf_counter() - start, "floor_cpu_s": time.process_time() - cpu0,
                   "text_chunks_x_delay_s": chunks * delay_s}
        if sync.get("status") != "completed":
            raise RuntimeError(f"the floor child did not complete: {sync}")
        for mode, independent in MODES.items():
            out = _fan_out(parent, home, children, independent, 60 + 10 * chunks * delay_s)
            figures.update({f"{mode}_{k}": v for k, v in out.items()})
            harness.drain_queue()
    finally:
        server.close()
        harness.reset_engine()
    return figures


def skipped(reason: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"case": 4, "title": "fan-out against a model", "params": params, "metrics": {}, "headlines": [],
            "skipped": reason}


def run(children: int, chunks: int, delay_s: float, rounds: int, root: Path,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    params = {"children": children, "chunks": chunks, "chunk_delay_s": delay_s, "rounds": rounds}
    mods = _imports()
    if isinstance(mods, str):
        log(f"  case 4 skipped: {mods}")
        return skipped(mods, params)
    per_round = []
    for r in range(rounds):
        per_round.append(_one_round(mods, children, chunks, delay_s, root))
        f = per_round[-1]
        log(f"  case 4 round {r + 1}/{rounds}: one child {f['floor_wall_s']:.2f} s; {children} children "
            f"{f['one_unit_wall_s']:.2f} s as one unit, {f['per_child_units_wall_s']:.2f} s as one unit each")
    return summarize(children, params, per_round)


def summarize(children: int, params: dict[str, Any], per_round: list[dict[str, float]]) -> dict[str, Any]:
    series = lambda key: [figures[key] for figures in per_round]  # noqa: E731
    heads = [
        headline(f"{children} children, one unit / one child alone: wall", series("one_unit_wall_s"),
                 series("floor_wall_s"), target_max=1.05, target="<= 1.05"),
        headline(f"{children} children, a unit each / one child alone: wall", series("per_child_units_wall_s"),
                 series("floor_wall_s"), target_max=1.05, target="<= 1.05"),
        headline(f"{children} children, one unit / one child alone: CPU per child",
                 series("one_unit_cpu_s_per_child"), series("floor_cpu_s"), target_max=None, target="(info)"),
        headline("one child alone / (text chunks x delay): wall", series("floor_wall_s"),
                 series("text_chunks_x_delay_s"), target_max=None, target="(info)",
                 note="the server also waits the delay before its finish and usage chunks"),
    ]
    return {"case": 4, "title": "fan-out against a model", "params": params,
            "metrics": {key: spread(series(key)) for key in per_round[0]}, "headlines": heads, "skipped": None}
