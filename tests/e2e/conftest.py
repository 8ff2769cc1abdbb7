"""End-to-end harness: the ``offload`` CLI as a subprocess against a loopback scripted server.

``cli(*args)`` starts ``python -m offload ...`` with this test's HERMES_HOME and reads its
output incrementally on a thread; ``wait_for(pattern)`` blocks until a line matches or the
deadline passes (then fails with the whole output) — no fixed sleeps anywhere. Every process
and server a test starts is killed / stopped at teardown.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from offload.testing.model_server import Reply, ScriptedModelServer

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 30.0


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for ``python -m offload``: this checkout, no user overrides or keys."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "OPENAI_"))}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **extra)
    return env


def resume_never() -> None:
    """``delegation.resume: never`` in this test's home (``$HERMES_HOME``): a test about a unit
    recovered ``unknown`` after its owner was killed keeps it on that path (the default resumes it)."""
    (Path(os.environ["HERMES_HOME"]) / "config.yaml").write_text("delegation: {resume: never}\n", encoding="utf-8")


def offload(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m offload ARGS`` to the end, stdout and stderr apart; ``env`` adds variables."""
    return subprocess.run([sys.executable, "-m", "offload", *args], capture_output=True, text=True,
                          env=cli_env(**env), timeout=DEADLINE_S * 2, stdin=subprocess.DEVNULL)


def one_line(stderr: str) -> str:
    """The single line a user-fixable error prints (and never a traceback or a bug report)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr and "please report" not in stderr, stderr
    return lines[0]


class Cli:
    def __init__(self, args: tuple[str, ...], home: Path, cwd: Path, **extra: str) -> None:
        env = cli_env(HERMES_HOME=str(home), **extra)
        self.proc = subprocess.Popen([sys.executable, "-m", "offload", *args], cwd=cwd, env=env, text=True,
                                     encoding="utf-8", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._eof = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout_s: float = DEADLINE_S, start: int = 0) -> re.Match[str]:
        """The first line at or after index ``start`` matching ``pattern``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for line in self.lines[start:]:
                    match = regex.search(line)
                    if match:
                        return match
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    break
                self._changed.wait(remaining)
        pytest.fail(f"no line matching {pattern!r} within {timeout_s} s (process {'ended' if self._eof else 'running'})"
                    f"; output so far:\n{self.output}")

    def mark(self) -> int:
        with self._changed:
            return len(self.lines)

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout_s: float = DEADLINE_S) -> int:
        """Close stdin and wait for the exit code (and the last output line)."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"offload did not exit within {timeout_s} s; output:\n{self.output}")
        with self._changed:
            self._changed.wait_for(lambda: self._eof, timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def open_dashboard(cli: Callable[..., "Cli"]) -> Any:
    """``offload dashboard --port 0`` on this test's home, once it listens: a ``Served`` (its URL
    and the token it printed at start, as a person reads them)."""
    from tests.dashboard.conftest import Served

    board = cli("dashboard", "--port", "0")
    url = board.wait_for(r"offload dashboard on (http://\S+)/ ").group(1)
    return Served(url, board.wait_for(r"open \S+\?token=(\S+) once").group(1))


@pytest.fixture
def workspace(tmp_path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def cli(_isolated_hermes_home, workspace) -> Iterator[Callable[..., Cli]]:
    started: list[Cli] = []

    def start(*args: str, **env: str) -> Cli:
        """``offload ARGS``; ``env`` adds variables (a key: ``OFFLOAD_API_KEY="..."``)."""
        proc = Cli(args, _isolated_hermes_home, workspace, **env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture
def write_config(_isolated_hermes_home, workspace) -> Callable[..., dict]:
    """Point offload at ``server``; ``delegation`` keys go under ``delegation:``."""
    def write(server: ScriptedModelServer, **delegation: Any) -> dict:
        data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
                "toolsets": ["terminal", "file", "delegation"], "delegation": delegation}
        (_isolated_hermes_home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
        return data
    return write


def until(check: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    """Poll ``check()`` until it returns something true (another process writes on its own
    schedule: there is no event to wait on); fail naming ``what`` when it does not in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"{what} within {timeout_s:g} s")


SESSION_RE = r"session (sess_[0-9a-f]+)"
HANDLE_RE = r"delegated \d+ task\(s\) in the background: (deleg_[0-9a-f]+)"


def scripted_parent(*, child: Callable[[dict[str, Any]], Reply], delegate: dict[str, Any],
                    after_tool: Reply | None = None, on_result: Reply | None = None) -> Callable[[dict], Reply]:
    """A parent that delegates on any user message, says so after the tool result, and answers
    each injected result; every subagent request goes to ``child``."""
    from offload.testing.demo_script import last_role, request_role
    from offload.testing.model_server import last_message_text, text_reply, tool_call_reply

    def script(request: dict[str, Any]) -> Reply:
        if request_role(request) == "subagent":
            return child(request)
        if last_role(request) == "tool":
            return after_tool or text_reply("Started it in the background.")
        if last_message_text(request).startswith("[ASYNC DELEGATION"):
            return on_result or text_reply("Result noted.")
        return tool_call_reply("delegate_task", delegate)
    return script


def delegating_chat(cli: Callable[..., Cli], *, started: bool = True) -> tuple[Cli, str]:
    """``offload chat`` told "go" by a ``scripted_parent`` (config already written): the chat and
    the handle's delegation id, after the parent's "Started it" unless ``started`` is False."""
    chat = cli("chat")
    chat.send("go")
    did = chat.wait_for(HANDLE_RE).group(1)
    if started:
        chat.wait_for(r"agent> Started it")
    return chat, did


INTERIM_HEADER = "[ASYNC DELEGATION TASK FAILED"


def parent_requests_with_results(server: ScriptedModelServer, interim: bool = False) -> list[dict[str, Any]]:
    """The parent's requests whose last message is an injected final result (``interim``: an
    injected interim failure notice instead, which is an early warning and not the result)."""
    from offload.testing.demo_script import request_role
    from offload.testing.model_server import last_message_text

    return [r for r in server.requests if request_role(r) == "parent"
            and r["messages"][-1]["role"] == "user" and last_message_text(r).startswith("[ASYNC DELEGATION")
            and last_message_text(r).startswith(INTERIM_HEADER) == interim]


@pytest.fixture
def shared_ledger(_isolated_hermes_home, monkeypatch) -> str:
    """A fresh PostgreSQL schema as this home's ``ledger.url`` (this process uses it too)."""
    from tools import async_delegation_delivery as delivery
    from tests.postgres_support import FreshSchema

    schema = FreshSchema()
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", schema.url)
    delivery.reset_for_tests()
    yield schema.url
    delivery.reset_for_tests()
    schema.drop()
