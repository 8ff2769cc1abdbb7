"""``terminal.sandbox`` (issue 40 points 1-3): by default every ``run_command`` (a subagent's and
the parent's) runs under bubblewrap: it writes its workspace and nothing else even where its text
hides the target, sees no offload home, no host process, no host Unix socket, no loopback
service, no secret variable, and cannot make a user namespace; where no sandbox can run, nothing
runs and the error names both fixes. The end-to-end attacks through ``offload run`` are in
tests/security/."""
from __future__ import annotations

import os
import shutil
import socket
import sys
import uuid
from pathlib import Path

import pytest

from offload.config import OffloadConfig
from offload.toolsets import terminal_sandbox
from offload.toolsets.terminal_tool import run_command_handler
from offload.toolsets.toolspec import ToolContext, ToolError

pytestmark = pytest.mark.timeout(60)


def _no_sandbox() -> str | None:
    why = terminal_sandbox.no_sandbox_reason()
    if why and os.environ.get("CI") == "true":  # .ci/services.d/35-bubblewrap.sh installs it: a missing one is a failure
        pytest.fail(f"no sandbox although CI installs bubblewrap (.ci/services.d/35-bubblewrap.sh): {why}")
    return why


@pytest.fixture
def sandboxed() -> None:
    why = _no_sandbox()
    if why:
        pytest.skip(why)


def _agent(workspace: Path, subagent: bool = True, **settings: object) -> ToolContext:
    return ToolContext(workspace=workspace, settings={"subagent": subagent, **settings})


def _run(ctx: ToolContext, command: str) -> str:
    return run_command_handler({"command": command}, ctx)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def test_a_command_writes_its_workspace_and_nothing_else(sandboxed, workspace: Path, tmp_path: Path) -> None:
    outside = Path.home() / f".offload-sandbox-probe-{uuid.uuid4().hex}"
    sibling = tmp_path / "elsewhere"
    sibling.mkdir()
    # the targets are in a script: the classifier sees `sh escape.sh`, only the sandbox stops it
    (workspace / "escape.sh").write_text(f"echo kept > inside.txt\n"
                                         f"echo escaped > {outside}\n"
                                         f"echo escaped > {sibling}/x || echo 'tmp: refused'\n"
                                         "echo escaped > /usr/offload-x || echo 'usr: refused'\n")
    output = _run(_agent(workspace), "sh escape.sh")
    assert (workspace / "inside.txt").read_text() == "kept\n"
    assert not outside.exists() and not (sibling / "x").exists() and not Path("/usr/offload-x").exists()
    assert "tmp: refused" in output and "usr: refused" in output, output


def test_the_parents_own_commands_are_sandboxed_too(sandboxed, workspace: Path) -> None:
    output = _run(_agent(workspace, subagent=False), f"ls /proc/{os.getpid()} || echo 'no offload process'")
    assert "no offload process" in output, output


def test_offloads_home_and_the_users_secrets_are_not_there(sandboxed, workspace: Path, monkeypatch) -> None:
    home = Path.home() / f".offload-sandbox-home-{uuid.uuid4().hex}"  # outside /tmp, which is private anyway
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    try:
        (home / "config.yaml").write_text("api_key_env: SECRET\n")
        (workspace / "peek.sh").write_text(f"cat {home}/config.yaml || echo 'no home'\n"
                                           "echo LS: $(ls -A ~); env | grep -c HERMES_HOME\n")
        output = _run(_agent(workspace, offload_home=str(home)), "sh peek.sh")
        assert "SECRET" not in output and "no home" in output, output
        listing = output.split("LS:", 1)[1].splitlines()[0].split()
        assert ".ssh" not in listing and not any(".offload-sandbox-home" in name for name in listing), output
        assert output.rstrip().endswith("\n0"), output  # no HERMES_HOME in its environment
    finally:
        shutil.rmtree(home)


def test_a_workspace_containing_offloads_home_sees_it_masked(sandboxed, tmp_path: Path) -> None:
    home = tmp_path / "ws" / ".hermes"
    home.mkdir(parents=True)
    (home / "config.yaml").write_text("secret: 1\n")
    ctx = _agent(tmp_path / "ws", offload_home=str(home))
    output = _run(ctx, "ls -A .hermes; cat .hermes/config.yaml; echo x > .hermes/config.yaml; echo done")
    assert "secret" not in output and "done" in output, output
    assert (home / "config.yaml").read_text() == "secret: 1\n"


def test_a_workspace_inside_offloads_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "sub").mkdir(parents=True)
    for workspace in (home, home / "sub"):
        with pytest.raises(ToolError, match="offload's own home .* another folder"):
            _run(_agent(workspace, offload_home=str(home)), "true")


def test_no_loopback_service_and_no_host_unix_socket(sandboxed, workspace: Path, tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    unix_path = tmp_path / "host.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix.listen()
    listener.setblocking(False)
    unix.setblocking(False)
    port = listener.getsockname()[1]
    script = ("import socket\nfor fam, addr in ((socket.AF_INET, ('127.0.0.1', %d)), (socket.AF_UNIX, %r)):\n"
              "    try:\n        socket.socket(fam).connect(addr); print('REACHED', addr)\n"
              "    except OSError as exc:\n        print('HELD', exc)\n") % (port, str(unix_path))
    (workspace / "probe.py").write_text(script)
    try:
        output = _run(_agent(workspace), f"{sys.executable} probe.py")
        assert "REACHED" not in output and output.count("HELD") == 2, output
        for server in (listener, unix):
            with pytest.raises(BlockingIOError):
                server.accept()
    finally:
        listener.close()
        unix.close()


def test_no_nested_user_namespace(sandboxed, workspace: Path) -> None:
    output = _run(_agent(workspace), f"{sys.executable} -c 'import os; os.unshare(os.CLONE_NEWUSER)' && echo made")
    assert "made" not in output and "exit code: 1" in output, output


def test_the_interpreter_offload_runs_on_is_usable_inside(sandboxed, workspace: Path) -> None:
    assert "exit code: 0\nok" in _run(_agent(workspace), f"{sys.executable} -c 'print(\"ok\")'")


@pytest.mark.parametrize("mode", ["auto", "bwrap"])
def test_no_sandbox_available_runs_nothing_and_names_both_fixes(workspace: Path, monkeypatch, mode: str) -> None:
    monkeypatch.setattr(terminal_sandbox.shutil, "which", lambda name: None)
    for subagent in (True, False):
        with pytest.raises(ToolError) as info:
            _run(_agent(workspace, subagent=subagent, terminal={"sandbox": mode}), "echo ran > ran.txt")
        assert "apt install bubblewrap" in str(info.value) and "terminal.sandbox none" in str(info.value)
        assert "bubblewrap (bwrap) is not installed" in str(info.value)
    assert not (workspace / "ran.txt").exists()


def test_an_agent_built_without_a_config_is_sandboxed(workspace: Path, monkeypatch) -> None:
    monkeypatch.setattr(terminal_sandbox.shutil, "which", lambda name: None)
    with pytest.raises(ToolError, match="not installed"):
        _run(ToolContext(workspace=workspace), "true")


def test_none_runs_unsandboxed_with_the_allow_listed_environment(workspace: Path, monkeypatch) -> None:
    monkeypatch.setattr(terminal_sandbox.shutil, "which", lambda name: None)
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", "postgresql://u:pw@h/db")
    output = _run(_agent(workspace, terminal={"sandbox": "none"}), "env")
    assert "exit code: 0" in output and "OFFLOAD_LEDGER_URL" not in output


def test_the_keys_and_their_defaults() -> None:
    terminal = OffloadConfig().terminal
    assert (terminal.sandbox, terminal.network) == ("auto", "none")
    with pytest.raises(ValueError, match="'auto', 'bwrap' or 'none'"):
        OffloadConfig.model_validate({"terminal": {"sandbox": "docker"}})
    with pytest.raises(ValueError, match="'none' or 'host'"):
        OffloadConfig.model_validate({"terminal": {"network": "allowlist"}})
