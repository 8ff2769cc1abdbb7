"""Case 4 — fan-out against a model: ``children`` background children, each streaming a
scripted reply from the loopback fake OpenAI-compatible server for ~``chunks * delay`` s.

Per round: the floor — one child run synchronously through the same ``delegate_task`` path,
measured — then the fan-out: one ``delegate_task(tasks=..., background=True)`` call with one
completion unit per child (``independent_completions``), timed from the call to the last
completion event, with process CPU time over the same window. Headline: fan-out wall / floor
wall. The server runs in this process, so CPU per child includes serving its stream.

The model server and agent runtime are imported lazily: until they exist, the case reports
itself skipped with the reason.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from bench import harness
from bench.stats import headline, spread
from tools.process_registry import process_registry

CHUNK_CHARS = 8


def _imports() -> tuple[Any, ...] | str:
    try:
        import offload
        from agent.core import AIAgent
        from offload import model_server
        from tools.delegate_tool import delegate_task
    except ImportError as exc:
        return f"the agent runtime or loopback model server is not available yet ({exc})"
    # An editable install of another checkout can serve a module this one lacks: refuse the mix.
    if Path(model_server.__file__).resolve().parent != Path(offload.__file__).resolve().parent:
        return f"offload/model_server.py is not in this checkout (found {model_server.__file__} instead)"
    return AIAgent, model_server.Reply, model_server.ScriptedModelServer, delegate_task


def _write_config(home: Path, children: int) -> None:
    cap = max(64, children + 1)  # 50 children must fit: one slot per call, one task per child
    (home / "config.yaml").write_text(
        f"delegation:\n  max_concurrent_children: {cap}\n  independent_completions: true\n", encoding="utf-8")


def _await_events(count: int, timeout_s: float) -> tuple[float, list[dict]]:
    events, deadline = [], time.monotonic() + timeout_s
    while len(events) < count and time.monotonic() < deadline:
        evt = process_registry.completion_queue.get(timeout=max(0.1, deadline - time.monotonic()))
        if evt.get("type") == "async_delegation":
            events.append(evt)
    return time.perf_counter(), events


def _one_round(mods: tuple, children: int, chunks: int, delay_s: float, root: Path) -> dict[str, float]:
    AIAgent, Reply, ScriptedModelServer, delegate_task = mods
    harness.reset_engine()
    home = harness.new_home(root, "fanout")
    _write_config(home, children)
    reply = Reply(text="x" * (CHUNK_CHARS * chunks), chunk_chars=CHUNK_CHARS, chunk_delay_s=delay_s)
    with ScriptedModelServer(lambda request: reply, model_ids=None) as server:
        parent = AIAgent(model="bench-model", base_url=server.url, api_key="bench-key", toolsets=["delegation"])
        start = time.perf_counter()
        sync = json.loads(delegate_task(goal="floor child", background=False, parent_agent=parent))
        floor_s = time.perf_counter() - start
        if sync.get("status") != "completed":
            raise RuntimeError(f"the floor child did not complete: {sync}")
        tasks = [{"goal": f"child {i}"} for i in range(children)]
        cpu0, start = time.process_time(), time.perf_counter()
        handle = json.loads(delegate_task(tasks=tasks, background=True, parent_agent=parent))
        if handle.get("status") != "dispatched":
            raise RuntimeError(f"the fan-out was not dispatched in the background: {handle}")
        end, events = _await_events(children, timeout_s=60 + 10 * chunks * delay_s)
        cpu_s = time.process_time() - cpu0
    harness.reset_engine()
    failed = [e for e in events if e.get("status") != "completed"]
    if len(events) != children or failed:
        raise RuntimeError(f"{len(events)} of {children} children reported, {len(failed)} not completed")
    return {"fanout_wall_s": end - start, "floor_wall_s": floor_s, "cpu_s_per_child": cpu_s / children,
            "nominal_stream_s": chunks * delay_s}


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
        log(f"  case 4 round {r + 1}/{rounds}: {children} children in {per_round[-1]['fanout_wall_s']:.2f} s, "
            f"one child alone {per_round[-1]['floor_wall_s']:.2f} s")
    series = lambda key: [figures[key] for figures in per_round]  # noqa: E731
    heads = [
        headline(f"{children} background children / one child alone: wall", series("fanout_wall_s"),
                 series("floor_wall_s"), target_max=1.1, target="<= 1.1"),
        headline(f"{children} background children / scripted stream time: wall", series("fanout_wall_s"),
                 series("nominal_stream_s"), target_max=None, target="(info)"),
    ]
    return {"case": 4, "title": "fan-out against a model", "params": params,
            "metrics": {key: spread(series(key)) for key in per_round[0]}, "headlines": heads, "skipped": None}
