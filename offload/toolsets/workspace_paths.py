"""Confining tool paths to the task's workspace.

Owns the one check every path-taking tool goes through: a path the model gives (relative,
absolute, with ``..`` or through symlinks) is resolved to a real path and refused unless it is
the workspace itself or lies beneath it.

Invariant: ``resolve_inside`` only ever returns a fully resolved path inside the resolved
workspace. The check is made on resolved paths, so a symlink inside the workspace that points
outside it is refused just like ``../..``. (A symlink swapped in *between* the check and the use
is out of scope: the workspace belongs to the task, not to an adversary racing it.)
"""
from __future__ import annotations

import os
from pathlib import Path

from offload.toolsets.toolspec import ToolContext, ToolError


def workspace_root(ctx: ToolContext) -> Path:
    """The resolved workspace folder; a missing one is the operator's to fix."""
    root = Path(ctx.workspace).resolve()
    if not root.is_dir():
        raise ToolError(
            f"The task's workspace '{ctx.workspace}' is not an existing folder; "
            "whoever started this agent must create it before tools can run."
        )
    return root


def resolve_inside(workspace: Path, raw: str, tool: str) -> Path:
    """Resolve ``raw`` (relative to the workspace unless absolute) and refuse escapes."""
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
