"""``terminal.sandbox``: run a subagent's shell commands where they cannot write outside their
workspace, with bubblewrap (``bwrap``), where the platform has it.

The approvals classifier (``command_risk``) reads a command's text; a program can still do
whatever the text hides (``python -c``, a script). With ``terminal.sandbox: bwrap`` a
subagent's ``run_command`` runs in a mount namespace where everything is read-only (``--ro-bind
/ /``) except its workspace (bound writable), a private ``/tmp`` and ``/dev``; offload's own home
is hidden (an empty tmpfs over it) unless the workspace lies inside it. The network is left as
it is (``fetch_url`` has its own guard; a build needs its package index).

Invariants: pure argv building (``sandbox_argv``); no fallback -- a sandbox asked for and not
available is a ToolError naming the key and both fixes, never an unsandboxed run.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from offload.toolsets.toolspec import ToolError

SANDBOX_KEY = "terminal.sandbox"
Sandbox = Literal["none", "bwrap"]


class TerminalConfig(BaseModel):
    """The ``terminal:`` section of config.yaml."""

    model_config = ConfigDict(extra="forbid")

    sandbox: Sandbox = Field("none", description=(
        "none, or bwrap: a subagent's shell commands run under bubblewrap with everything but its workspace "
        "read-only, a private /tmp and offload's home hidden (Linux; apt install bubblewrap)"))


def sandbox_argv(sandbox: str, workspace: Path, cwd: str, home: Path | None, tool: str) -> list[str]:
    """The words to put before ``/bin/sh -c CMD`` (none for ``none``); ToolError when ``bwrap``
    is asked for and not installed."""
    if sandbox != "bwrap":
        return []
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise ToolError(f"{tool}: {SANDBOX_KEY} is bwrap but bubblewrap is not installed on this machine, so the "
                        "command was not run. The operator must install it (apt install bubblewrap) or set "
                        f"`offload config set {SANDBOX_KEY} none`.")
    workspace = workspace.resolve()
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--bind", str(workspace), str(workspace)]
    if home is not None and not workspace.is_relative_to(home):
        argv += ["--tmpfs", str(home)]  # offload's config, ledger and logs: not there at all
    return argv + ["--die-with-parent", "--chdir", cwd, "--"]
