"""``terminal.sandbox: bwrap`` (issue 29 item 2: a classifier is not a sandbox; where the platform
offers one cheaply, offer it): a subagent's command runs under bubblewrap, writes in its
workspace, cannot write anywhere else even where its text hides the target (a script), and
does not see offload's home; asked for and missing, nothing runs and the error names the key."""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from offload.config import OffloadConfig
from offload.toolsets import terminal_sandbox
from offload.toolsets.terminal_tool import run_command_handler
from offload.toolsets.toolspec import ToolContext, ToolError

pytestmark = pytest.mark.timeout(60)


def _bwrap_works() -> str | None:
    if shutil.which("bwrap") is None:
        if os.environ.get("CI") == "true":  # .ci/services.d/35-bubblewrap.sh installs it: a missing one is a failure
            pytest.fail("bubblewrap is not installed although CI installs it (.ci/services.d/35-bubblewrap.sh)")
        return "bubblewrap is not installed (apt install bubblewrap); .ci installs it"
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"bwrap cannot make namespaces here: {probe.stderr.strip()}"


def _subagent(workspace: Path, home: Path | None = None) -> ToolContext:
    settings = {"subagent": True, "terminal_sandbox": "bwrap"}
    if home is not None:
        settings["protected_home"] = str(home)
    return ToolContext(workspace=workspace, settings=settings)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def test_a_sandboxed_command_writes_its_workspace_and_nothing_else(workspace: Path, tmp_path: Path) -> None:
    why = _bwrap_works()
    if why:
        pytest.skip(why)
    outside = Path.home() / f".offload-sandbox-probe-{uuid.uuid4().hex}"
    sibling = tmp_path / "elsewhere"
    sibling.mkdir()
    # the targets are in a script: the classifier sees `sh escape.sh`, only the sandbox stops it
    (workspace / "escape.sh").write_text(f"echo kept > inside.txt\n"
                                         f"echo escaped > {outside} || echo 'home: refused'\n"
                                         f"echo escaped > {sibling}/x || echo 'tmp: refused'\n")
    output = run_command_handler({"command": "sh escape.sh"}, _subagent(workspace))
    assert (workspace / "inside.txt").read_text() == "kept\n"
    assert not outside.exists() and not (sibling / "x").exists()
    assert "Read-only file system" in output and "home: refused" in output and "tmp: refused" in output, output


def test_offloads_home_is_not_there_for_a_sandboxed_command(workspace: Path, tmp_path: Path) -> None:
    why = _bwrap_works()
    if why:
        pytest.skip(why)
    home = Path.home() / f".offload-sandbox-home-{uuid.uuid4().hex}"  # outside /tmp, which is private anyway
    home.mkdir()
    try:
        (home / "config.yaml").write_text("api_key_env: SECRET\n")
        (workspace / "peek.sh").write_text(f"cat {home}/config.yaml || echo 'no home'\n")
        output = run_command_handler({"command": "sh peek.sh"}, _subagent(workspace, home))
        assert "SECRET" not in output and "no home" in output, output
    finally:
        shutil.rmtree(home)


def test_a_sandbox_asked_for_and_missing_runs_nothing_and_names_the_key(workspace: Path, monkeypatch) -> None:
    monkeypatch.setattr(terminal_sandbox.shutil, "which", lambda name: None)
    with pytest.raises(ToolError) as info:
        run_command_handler({"command": "echo ran > ran.txt"}, _subagent(workspace))
    assert "terminal.sandbox is bwrap" in str(info.value) and "apt install bubblewrap" in str(info.value)
    assert not (workspace / "ran.txt").exists()


def test_the_parents_own_commands_are_not_sandboxed(workspace: Path, monkeypatch) -> None:
    monkeypatch.setattr(terminal_sandbox.shutil, "which", lambda name: None)  # would refuse if it applied
    ctx = ToolContext(workspace=workspace, settings={"terminal_sandbox": "bwrap"})
    assert "exit code: 0" in run_command_handler({"command": "echo ran > ran.txt"}, ctx)
    assert (workspace / "ran.txt").read_text() == "ran\n"


def test_the_key_takes_none_or_bwrap_only() -> None:
    assert OffloadConfig().terminal.sandbox == "none"
    with pytest.raises(ValueError, match="'none' or 'bwrap'"):
        OffloadConfig.model_validate({"terminal": {"sandbox": "docker"}})
