"""Confining tool paths to the task's workspace.

Owns the one check every path-taking tool goes through: a path the model gives (relative,
absolute, with ``..`` or through symlinks) is resolved to a real path and refused unless it is
the workspace itself or lies beneath it.

Invariant: ``resolve_inside`` only ever returns a fully resolved path inside the resolved
workspace. The check is made on resolved paths, so a symlink inside the workspace that points
outside it is refused just like ``../..``. (A symlink swapped in *between* the check and the use
is out of scope: the workspace belongs to the task, not to an adversary racing it.)

A subagent's tools also stay out of offload's own home (``settings["protected_home"]``, set by
``offload.agent.child`` unless the workspace IS the home): ``resolve_inside`` refuses a path in
it, the walks of ``file_walk`` skip it, and ``home_mentions`` finds it named in a command.
"""
from __future__ import annotations

import os
from pathlib import Path

from offload.home import get_hermes_home
from offload.toolsets.toolspec import ToolContext, ToolError


def workspace_root(ctx: ToolContext) -> Path:
    """The resolved workspace folder; a missing one, or one in offload's home, is the
    operator's to fix (checked on each call: an MCP client's root may change between calls)."""
    root = Path(ctx.workspace).resolve()
    if not root.is_dir():
        raise ToolError(
            f"The task's workspace '{ctx.workspace}' is not an existing folder; "
            "whoever started this agent must create it before tools can run."
        )
    home = ctx.settings.get("offload_home")
    if home and in_home(root, Path(os.path.realpath(home))):
        raise ToolError(
            f"The task's workspace '{root}' is offload's own home {home} or lies inside it (its config.yaml, "
            "state.db and logs), which no agent may work in. Whoever started this agent must choose another "
            "folder (`offload config set workspace <dir>`, or the MCP client's root).")
    return root


def offload_home(ctx: ToolContext) -> Path:
    """Offload's home, resolved: the one the runtime named, else ``$HERMES_HOME`` (``~/.hermes``)."""
    raw = ctx.settings.get("offload_home")
    return Path(os.path.realpath(raw)) if raw else Path(os.path.realpath(get_hermes_home()))


def protected_home(ctx: ToolContext) -> Path | None:
    """Offload's home when the calling agent must stay out of it (a subagent), else None."""
    raw = ctx.settings.get("protected_home")
    return Path(raw).resolve() if raw else None


def in_home(path: Path, home: Path | None) -> bool:
    """Whether ``path`` (following symlinks) is ``home`` or lies beneath it."""
    if home is None:
        return False
    resolved = Path(os.path.realpath(path))
    return resolved == home or resolved.is_relative_to(home)


def home_refusal(tool: str, raw: str, home: Path) -> ToolError:
    return ToolError(
        f"{tool}: '{raw}' is in offload's own home {home} (its config.yaml, state.db and logs), which a "
        "subagent may not read or change. Work with the other files of the workspace; if the task needs "
        "offload's settings or records, say so in your final answer."
    )


def home_mentions(command: str, home: Path, workspace: Path) -> str | None:
    """How ``command`` names offload's home (its path, ``~/…``, ``$HERMES_HOME``, or its path
    relative to the workspace), or None. A check of the text, not a sandbox: a command that
    builds the path at run time is not caught."""
    names = [str(home), "$HERMES_HOME", "${HERMES_HOME}"]
    if home.is_relative_to(Path.home()):
        names.append("~/" + home.relative_to(Path.home()).as_posix())
    if home.is_relative_to(workspace) and home != workspace:
        names.append(home.relative_to(workspace).as_posix())
    return next((name for name in names if name in command), None)


def resolve_inside(workspace: Path, raw: str, tool: str, home: Path | None = None) -> Path:
    """Resolve ``raw`` (relative to the workspace unless absolute) and refuse escapes, and a
    path in ``home`` (offload's, for a subagent)."""
    if "\x00" in raw:
        raise ToolError(f"{tool}: the path {raw!r} contains a NUL byte; give a plain path.")
    candidate = Path(raw).expanduser() if raw.startswith("~") else Path(raw)
    if not candidate.is_absolute():
        candidate = workspace / candidate
    # strict=False: the target may not exist yet (write_file); existing parts and symlinks
    # along the way (even a dangling final one) are still resolved.
    resolved = candidate.resolve(strict=False)
    if resolved != workspace and not resolved.is_relative_to(workspace):
        raise ToolError(
            f"{tool}: the path '{raw}' resolves to '{resolved}', which is outside the workspace "
            f"'{workspace}'. Use a path inside the workspace (relative paths start there)."
        )
    if in_home(resolved, home):
        raise home_refusal(tool, raw, home)  # type: ignore[arg-type]
    return resolved


def relative_display(workspace: Path, path: Path) -> str:
    """How a path is shown to the model: relative to the workspace, '.' for the root."""
    try:
        rel = path.relative_to(workspace)
    except ValueError:
        return str(path)
    return rel.as_posix() if rel.parts else "."


def is_inside(workspace: Path, path: Path) -> bool:
    """Whether ``path`` (following any symlinks) stays inside the workspace."""
    resolved = Path(os.path.realpath(path))
    return resolved == workspace or resolved.is_relative_to(workspace)
