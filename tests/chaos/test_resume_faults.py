"""Resume fault suite (issue 44): owners of durable background children SIGKILLed at random
points, and long-lived processes on the same ledger resuming their work, on SQLite and PostgreSQL.

Each trial: a scripted model server (this process), a home with ``delegation.resume: auto``, and
a chain of real processes (``resume_owner.py``): an owner delegates 1-2 calls of 1-3 children
through the Python API and takes their results; each child runs 0-3 side-effecting
``run_command`` calls, each appending its own line to ``marker.txt`` in the workspace (the
marker file counts executions), then answers ``real:<tag>``. Each process of the chain but the
last dies at a seeded random point (during a model stream, between a reply and its write,
between a call's start mark and the call, between the call and its result, around finalize,
around delivery, or after a random delay); the next one, a taker, resumes and delivers.
Checked per trial:

- 0 results lost: every unit a handle named is acknowledged, nothing of the session undelivered;
- 0 delivered twice after ack: no ``G`` line for a unit after its ``A`` line, in any process;
- 0 side-effecting calls executed twice: no line of ``marker.txt`` twice;
- at most one model call re-issued per death per child: a child of N steps made at most
  N + 1 + deaths model calls;
- every child ends with its real result (``real:<tag>``, status completed) or its unit ends
  ``unknown`` with its reason (a quarter of the trials allow one resume only:
  ``delegation.max_resumes: 1``), its finished children keeping their real results.

``OFFLOAD_RESUME_TRIALS`` (default 6 on SQLite, 3 on PostgreSQL; ``OFFLOAD_CHAOS_LONG=1``: 300
and 150) sets the trials per backend; ``OFFLOAD_CHAOS_SEED`` replays a run (a failure names it).
PostgreSQL runs when ``OFFLOAD_TEST_POSTGRES_DSN`` is set (a fresh schema per trial).
"""
from __future__ import annotations

import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from offload.testing.demo_script import request_role, subagent_goal
from offload.testing.model_server import ScriptedModelServer, text_reply, tool_call_reply
from tests.chaos.support import LONG, base_seed, report

ROOT = Path(__file__).resolve().parents[2]
OWNER = Path(__file__).with_name("resume_owner.py")
POINTS = ("stream", "reply", "mark", "effect", "finalize", "finalized", "deliver", "acked", "timer")
MAX_DEATHS = 3
PROCESS_DEADLINE_S = 90.0
GOAL_RE = re.compile(r"^(\S+) steps=(\d)$")

pytestmark = [pytest.mark.chaos]


def trials(backend: str) -> int:
    raw = os.environ.get("OFFLOAD_RESUME_TRIALS", "").strip()
    if raw:
        return int(raw)
    return (300 if backend == "sqlite" else 150) if LONG else (6 if backend == "sqlite" else 3)


def child_script(request: dict[str, Any]):
    """A child of goal ``<tag> steps=<n>``: n marker commands, one per reply, then ``real:<tag>``.
    The step is the count of tool results so far, so a resumed child asks for the next one (a
    call answered "the host died" counts as done: the model is told to check, never to repeat)."""
    if request_role(request) != "subagent":
        return text_reply("only children talk to this server")
    tag, steps = GOAL_RE.match(subagent_goal(request)).groups()  # type: ignore[union-attr]
    done = sum(1 for m in request["messages"] if m.get("role") == "tool")
    if done < int(steps):
        return tool_call_reply("run_command", {"command": f"echo {tag}-{done} >> marker.txt"})
    return text_reply(f"real:{tag}")


@dataclass
class Trial:
    seed: int
    base: Path
    server: ScriptedModelServer
    ledger_url: str | None
    rng: random.Random = field(init=False)
    plan: list[list[str]] = field(default_factory=list)
    steps: dict[str, int] = field(default_factory=dict)
    manifests: list[Path] = field(default_factory=list)
    deaths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        # Mostly enough resumes for every death; sometimes one only, so a unit whose owner dies
        # twice ends `unknown`, with the reason.
        self.max_resumes = 1 if self.rng.random() < 0.25 else MAX_DEATHS + 1
        self.home, self.workspace = self.base / "home", self.base / "ws"
        self.home.mkdir(parents=True)
        self.workspace.mkdir()
        for call in range(self.rng.randint(1, 2)):
            goals = []
            for task in range(self.rng.randint(1, 3)):
                tag, steps = f"s{self.seed}c{call}t{task}", self.rng.randint(0, 3)
                self.steps[tag] = steps
                goals.append(f"{tag} steps={steps}")
            self.plan.append(goals)
        config: dict[str, Any] = {
            "model": "demo-model", "base_url": self.server.url, "workspace": str(self.workspace),
            "toolsets": ["terminal", "delegation"],
            "delegation": {"resume": "auto", "max_resumes": self.max_resumes, "max_concurrent_children": 8}}
        if self.ledger_url:
            config["ledger"] = {"url": self.ledger_url, "lease_seconds": 2, "heartbeat_seconds": 0.5}
        (self.home / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")

    def point(self) -> tuple[str, int]:
        """Where the next process dies: a point and its count (the count may never be reached:
        then that process finishes the work itself)."""
        point = self.rng.choice(POINTS)
        calls = sum(self.steps.values())
        most = {"stream": calls + len(self.steps), "reply": max(calls, 1), "mark": max(calls, 1),
                "effect": max(calls, 1), "deliver": len(self.plan), "acked": len(self.plan)}.get(point, 2)
        return point, self.rng.randint(1, most)

    def run(self) -> None:
        expected: list[str] = []  # the units a taker must acknowledge before it may return
        for index in range(MAX_DEATHS + 1):
            last = index == MAX_DEATHS or (index > 0 and self.rng.random() < 0.4)
            point, n = ("none", 0) if last else self.point()
            role = "owner" if index == 0 else "taker"
            manifest = self.base / f"manifest-{index}"
            self.manifests.append(manifest)
            args = [sys.executable, str(OWNER), role, str(manifest), "sess_resume_faults",
                    "none" if point == "timer" else point, str(n),
                    json.dumps(self.plan if role == "owner" else expected)]
            env = {**os.environ, "HERMES_HOME": str(self.home), "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
            env.pop("OFFLOAD_LEDGER_URL", None)
            with open(self.base / f"stderr-{index}", "wb") as err:
                proc = subprocess.Popen(args, env=env, cwd=str(self.workspace), stdout=subprocess.DEVNULL, stderr=err)
            code = self._wait(proc, self.rng.uniform(0.3, 2.5) if point == "timer" else None)
            expected = sorted(set(self.lines("H")) - set(self.lines("A")))  # what the next one must deliver
            if code == -9:
                self.deaths.append(point)
                continue
            assert code == 0, f"process {index} ({role}) exited {code}: {self._stderr(index)}"
            return  # it finished the work (its point, if any, was never reached)
        raise AssertionError("the chain ended with a death")  # the last process never has a point

    def _wait(self, proc: subprocess.Popen, timer_s: float | None) -> int:
        try:
            if timer_s is not None:
                try:
                    return proc.wait(timeout=timer_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
            return proc.wait(timeout=PROCESS_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # its threads' stacks into its stderr file, to say where it hung
            time.sleep(1.0)
            proc.kill()
            proc.wait()
            raise AssertionError(f"a trial process took over {PROCESS_DEADLINE_S:g} s; its stderr and stacks:\n"
                                 f"{self._stderr(len(self.manifests) - 1)}") from None

    def _stderr(self, index: int) -> str:
        return (self.base / f"stderr-{index}").read_text(errors="replace")[-3000:]

    def lines(self, kind: str | None = None) -> list[Any]:
        out = []
        for manifest in self.manifests:
            if manifest.exists():
                for line in manifest.read_text().splitlines():
                    parts = line.split()
                    if parts and (kind is None or parts[0] == kind):
                        out.append(parts[1] if kind else parts)
        return out


def check(trial: Trial, counts: collections.Counter) -> None:
    from offload.ledger.config import LedgerConfig
    from offload.ledger.select import open_configured_ledger

    handles = set(trial.lines("H"))
    acked: set[str] = set()
    for parts in trial.lines():
        if parts[0] == "G":
            assert parts[1] not in acked, f"{parts[1]} handed over again after its ack"
        elif parts[0] == "A":
            acked.add(parts[1])
    assert handles <= acked, f"results lost: {sorted(handles - acked)} never acknowledged"
    marker = trial.workspace / "marker.txt"
    ran = marker.read_text().splitlines() if marker.exists() else []
    twice = [line for line, k in collections.Counter(ran).items() if k > 1]
    assert not twice, f"side-effecting calls executed twice: {twice}"
    calls = collections.Counter(subagent_goal(r).split()[0] for r in trial.server.requests
                                if request_role(r) == "subagent" and subagent_goal(r).startswith(f"s{trial.seed}c"))
    for tag, steps in trial.steps.items():
        assert calls[tag] <= steps + 1 + len(trial.deaths), (
            f"{tag}: {calls[tag]} model calls for {steps} steps and {len(trial.deaths)} death(s)")
        counts["reissued"] += max(0, calls[tag] - steps - 1)
    ledger = open_configured_ledger(trial.home / "state.db", LedgerConfig(url=trial.ledger_url))
    try:
        assert not ledger.undelivered_rows("sess_resume_faults"), "a result still waits for delivery"
        rows = [ledger.get(unit_id) for unit_id in sorted(acked)]
    finally:
        ledger.close()
    check_rows(rows, counts)
    counts["side_effects"] += len(ran)


def check_rows(rows: list[Any], counts: collections.Counter) -> None:
    """Every child of a unit has its real result, or the unit is ``unknown`` with a reason."""
    for row in rows:
        counts[f"units_{row.state}"] += 1
        goals = (row.task or {}).get("goals") or [(row.task or {}).get("goal")]
        entries = sorted((row.result or {}).get("results") or [], key=lambda e: e["task_index"])
        if row.state == "unknown":  # its finished children keep their real results
            assert "max_resumes" in str((row.event or {}).get("error")), f"{row.delegation_id}: {row.event}"
            entries = [e for e in entries if e.get("status") == "completed"]
        else:
            assert [e["task_index"] for e in entries] == list(range(len(goals))), (row.delegation_id, entries)
        for entry in entries:
            tag = GOAL_RE.match(goals[entry["task_index"]]).group(1)  # type: ignore[union-attr]
            assert entry["status"] == "completed" and entry.get("summary") == f"real:{tag}", entry
            counts["children_real"] += 1
            counts["children_resumed"] += bool(entry.get("resumed"))


def _backends() -> list[Any]:
    """Both backends run in the main pass; CI's ``OFFLOAD_TEST_LEDGER=postgresql`` pass of
    tests/chaos would only repeat them (each trial picks its own ledger), so it skips both."""
    again = os.environ.get("OFFLOAD_TEST_LEDGER", "") == "postgresql"
    return [pytest.param("sqlite", marks=pytest.mark.sqlite_only),
            pytest.param("postgresql", marks=[
                pytest.mark.skipif(not os.environ.get("OFFLOAD_TEST_POSTGRES_DSN"),
                                   reason="OFFLOAD_TEST_POSTGRES_DSN is not set"),
                pytest.mark.skipif(again, reason="run in the main pass; each trial opens its own PostgreSQL schema")])]


@pytest.mark.timeout(3600 if LONG or os.environ.get("OFFLOAD_RESUME_TRIALS") else 110)
@pytest.mark.parametrize("backend", _backends())
def test_owners_killed_at_random_points_lose_nothing_and_repeat_no_side_effect(backend, tmp_path):
    seed, count = base_seed(), trials(backend)
    counts: collections.Counter = collections.Counter()
    started = time.monotonic()
    with ScriptedModelServer(child_script) as server:
        for i in range(count):
            schema = None
            if backend == "postgresql":
                from tests.postgres_support import FreshSchema
                schema = FreshSchema()
            trial = Trial(seed + i, tmp_path / f"trial-{i}", server, schema.url if schema else None)
            try:
                trial.run()
                check(trial, counts)
            except AssertionError as exc:
                raise AssertionError(f"trial {i} (replay: OFFLOAD_CHAOS_SEED={seed + i} OFFLOAD_RESUME_TRIALS=1, "
                                     f"deaths at {trial.deaths}, plan {trial.plan}): {exc}") from exc
            finally:
                if schema is not None:
                    schema.drop()
            counts["trials"] += 1
            counts["deaths"] += len(trial.deaths)
            counts.update(f"died_{p}" for p in trial.deaths)
    report(f"resume faults ({backend})", seed=seed, seconds=round(time.monotonic() - started, 1), **dict(counts))
