"""Case 8 — resume latency (issue 44): how soon a dead owner's unfinished child continues.

Each trial kills a real owner: ``offload run`` delegates one child (``delegation.resume: auto``)
whose first model call hangs at the loopback model server (in this process, which stamps every
request as it arrives), and is SIGKILLed once that call is in flight. Then:

- SQLite (one host): a long-lived process, ``offload mcp`` over stdio, is started on that home;
  measured from just before its start to the resumed child's model call arriving (target 2 s).
  Beside it, the floor no offload code can beat: ``python -m offload --version`` (the
  interpreter and the CLI's imports) to its exit.
- PostgreSQL (two hosts, each its own home and ``OFFLOAD_HOST_ID`` on one ledger schema, as
  tests/postgres do): ``offload worker`` already running on host B, the owner on host A;
  measured from the SIGKILL to the resumed child's model call on B (target: the lease + 2 s;
  the lease is ``LEASE_S``, heartbeats every second). Skipped without a PostgreSQL DSN.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from bench.cases import postgres as case_postgres
from bench.cases.fanout import REPO_ROOT
from bench.report.stats import check, spread
from offload.testing.demo_script import last_role, request_role
from offload.testing.model_server import (ScriptedModelServer, hang_reply, last_message_text, text_reply,
                                          tool_call_reply)

LEASE_S = 4.0
SQLITE_TARGET_S = 2.0
DEADLINE_S = 60.0


class Stamps:
    """The loopback model's script: a parent that delegates once, a child whose first call hangs
    and whose next answers; the arrival time of each child call."""

    def __init__(self) -> None:
        self.child_calls: list[float] = []
        self.changed = threading.Condition()

    def script(self, request: dict[str, Any]) -> Any:
        if request_role(request) == "subagent":
            with self.changed:
                self.child_calls.append(time.perf_counter())
                first = len(self.child_calls) == 1
                self.changed.notify_all()
            return hang_reply("thinking") if first else text_reply("Resumed and done.")
        if last_role(request) == "tool":
            return text_reply("Started it in the background.")
        if last_message_text(request).startswith("[ASYNC DELEGATION"):
            return text_reply("Got it.")
        return tool_call_reply("delegate_task", {"goal": "answer after a restart"})

    def wait(self, count: int, timeout_s: float = DEADLINE_S) -> float:
        """The arrival time of child call number ``count`` (1-based), waiting for it."""
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.child_calls) >= count, timeout=timeout_s):
                raise RuntimeError(f"child model call {count} never came within {timeout_s:g} s "
                                   f"({len(self.child_calls)} came)")
            return self.child_calls[count - 1]


def _home(root: Path, name: str, server: ScriptedModelServer, workspace: Path) -> Path:
    home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    data = {"model": "bench-model", "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["delegation"], "delegation": {"resume": "auto"},
            "ledger": {"lease_seconds": LEASE_S, "heartbeat_seconds": 1}}
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return home


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "OPENAI_"))}
    return {**env, "HERMES_HOME": str(home), "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1", **extra}


def _offload(home: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "offload", *args], env=_env(home, **env), cwd=home,
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def _dead_owner(home: Path, stamps: Stamps, **env: str) -> float:
    """An ``offload run`` whose child's first model call is in flight, SIGKILLed; when it died."""
    owner = _offload(home, "run", "delegate it", **env)
    try:
        stamps.wait(len(stamps.child_calls) + 1)
        owner.send_signal(signal.SIGKILL)
        return time.perf_counter()
    finally:
        _stop(owner)


def sqlite_trial(root: Path) -> dict[str, float]:
    stamps, workspace = Stamps(), Path(tempfile.mkdtemp(prefix="ws-", dir=root))
    with ScriptedModelServer(stamps.script, model_ids=None) as server:
        home = _home(root, "resume-sqlite", server, workspace)
        _dead_owner(home, stamps)
        started = time.perf_counter()
        taker = _offload(home, "mcp")
        try:
            resumed_at = stamps.wait(2)
        finally:
            _stop(taker)
        floor_at = time.perf_counter()
        subprocess.run([sys.executable, "-m", "offload", "--version"], env=_env(home), cwd=home, check=True,
                       capture_output=True, timeout=DEADLINE_S)
        return {"sqlite_resume_s": resumed_at - started, "interpreter_and_imports_s": time.perf_counter() - floor_at}


def postgres_trial(base: str, root: Path) -> dict[str, float]:
    stamps, workspace = Stamps(), Path(tempfile.mkdtemp(prefix="ws-", dir=root))
    schema = case_postgres.Schema(base)
    try:
        with ScriptedModelServer(stamps.script, model_ids=None) as server:
            host_b = _home(root, "host-b", server, workspace)
            worker = _offload(host_b, "worker", OFFLOAD_LEDGER_URL=schema.url, OFFLOAD_HOST_ID="bench-host-b")
            try:
                killed_at = _dead_owner(_home(root, "host-a", server, workspace), stamps,
                                        OFFLOAD_LEDGER_URL=schema.url, OFFLOAD_HOST_ID="bench-host-a")
                return {"postgres_resume_s": stamps.wait(2, LEASE_S + DEADLINE_S) - killed_at}
            finally:
                _stop(worker)
    finally:
        schema.drop()


def run(rounds: int, root: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    from importlib.util import find_spec

    if find_spec("mcp") is None:  # the SQLite side's long-lived process is `offload mcp`
        return {**not_quick(), "skipped": "needs the MCP SDK: pip install -e '.[bench,mcp]'"}
    base = case_postgres.dsn()
    per_round: list[dict[str, float]] = []
    for r in range(rounds):
        figures = sqlite_trial(root)
        if base is not None:
            figures.update(postgres_trial(base, root))
        per_round.append(figures)
        log(f"  case 8 round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    return summarize(rounds, per_round, base)


def not_quick() -> dict[str, Any]:
    return {"case": 8, "title": "resume latency", "metrics": {}, "headlines": [],
            "skipped": "the full run only (each round starts and kills offload processes)"}


def summarize(rounds: int, per_round: list[dict[str, float]], base: str | None) -> dict[str, Any]:
    s = lambda key: [figures[key] for figures in per_round]  # noqa: E731
    checks = [check("SQLite: a long-lived process's start to the resumed child's model call", s("sqlite_resume_s"),
                    unit="s", target_max=SQLITE_TARGET_S, target=f"<= {SQLITE_TARGET_S:g} s")]
    notes = []
    if base is not None:
        checks.append(check(f"PostgreSQL, another host: the owner's death to the resumed child's model call "
                            f"(lease {LEASE_S:g} s)", s("postgres_resume_s"), unit="s",
                            target_max=LEASE_S + 2.0, target=f"<= lease + 2 s = {LEASE_S + 2:g} s"))
    else:
        notes.append("PostgreSQL side skipped: set OFFLOAD_BENCH_POSTGRES_DSN or OFFLOAD_TEST_POSTGRES_DSN")
    return {"case": 8, "title": "resume latency", "params": {"rounds": rounds, "lease_s": LEASE_S},
            "metrics": {key: spread(s(key)) for key in per_round[0]}, "headlines": [], "checks": checks,
            "skipped": None, "notes": notes}
