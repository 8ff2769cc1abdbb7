"""No tool a hostile child calls can freeze the process (issue 40, point 6), end to end in
``offload run``: a catastrophic pattern for ``search_files`` (``(a+)+$`` on 41 characters held
Python's ``re`` -- and the GIL -- for minutes: Ctrl-C ignored, every other child frozen), and a
tool blocked on the network that a Ctrl-C must still end within a second or so."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from offload.testing.demo_script import last_role, request_role
from offload.testing.model_server import ScriptedModelServer, last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import cli_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def configure(home: Path, server: ScriptedModelServer, workspace: Path, **extra: Any) -> None:
    data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["terminal", "file", "web", "delegation"], **extra}
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def child_calls(tool: str, arguments: dict[str, Any]):
    def script(request: dict[str, Any]):
        if request_role(request) == "parent":
            if last_role(request) == "tool" or "[ASYNC DELEGATION" in last_message_text(request):
                return text_reply("Noted.")
            return tool_call_reply("delegate_task", {"goal": "search the notes"})
        if last_role(request) == "tool":
            return text_reply(f"REPORT: {last_message_text(request)[:200]}")
        return tool_call_reply(tool, arguments)
    return script


def test_a_catastrophic_pattern_does_not_freeze_offload_run(_isolated_hermes_home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("a" * 41 + "!\n" + ("a" * 5000 + "!\n") * 200, encoding="utf-8")
    with ScriptedModelServer(child_calls("search_files", {"pattern": "(a+)+$"})) as server:
        configure(_isolated_hermes_home, server, workspace)
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "offload", "run", "search"], capture_output=True, text=True,
                              env=cli_env(), timeout=60, stdin=subprocess.DEVNULL)
        took_s = time.monotonic() - started
    assert done.returncode == 0, done
    assert "REPORT: No matches for '(a+)+$'" in done.stdout + done.stderr, done
    assert took_s < 30, took_s  # the whole run; the search itself takes milliseconds


def test_a_backreference_is_a_clear_tool_error_the_child_reads(_isolated_hermes_home: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("abab\n", encoding="utf-8")
    with ScriptedModelServer(child_calls("search_files", {"pattern": r"(ab)\1"})) as server:
        configure(_isolated_hermes_home, server, workspace)
        done = subprocess.run([sys.executable, "-m", "offload", "run", "search"], capture_output=True, text=True,
                              env=cli_env(), timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done
    assert "REPORT: Error: search_files: pattern '(ab)\\\\1' uses a backreference" in done.stdout + done.stderr, done


def test_ctrl_c_ends_offload_run_while_a_child_waits_on_a_silent_server(
        _isolated_hermes_home: Path, tmp_path: Path) -> None:
    """The child's fetch_url hangs on a server that accepts and never answers (30 s time cap);
    Ctrl-C (SIGINT) ends the whole run within a few seconds, the tool back within one."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted, held = threading.Event(), []

    def serve() -> None:
        conn, _ = listener.accept()
        held.append(conn)
        accepted.set()

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/silent"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        with ScriptedModelServer(child_calls("fetch_url", {"url": url})) as server:
            configure(_isolated_hermes_home, server, workspace, web={"allowed_hosts": ["127.0.0.1"]})
            proc = subprocess.Popen([sys.executable, "-m", "offload", "run", "fetch"], env=cli_env(), text=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                assert accepted.wait(60), "the child never reached the silent server"
                interrupted_at = time.monotonic()
                proc.send_signal(signal.SIGINT)
                out, err = proc.communicate(timeout=20)
                took_s = time.monotonic() - interrupted_at
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert proc.returncode == 130, (proc.returncode, out, err)  # interrupted
    assert took_s < 5, (took_s, err)  # not the fetch's 30 s cap
