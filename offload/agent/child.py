"""How a subagent is derived from its parent: toolsets, tools, role, settings and system prompt.

Owns ``derive_child_settings``, a pure function. Invariants: a child's toolsets are a subset
of its parent's (requested ∩ parent, or the parent's when none are requested); its tools are
the ones of those toolsets on its role's declared list (``offload.toolsets.child_tools``); the
``delegation`` toolset is removed once the child's depth reaches ``max_spawn_depth`` (setting,
default 1), so delegation can never recurse without bound, and from every leaf; and the child's
file and terminal tools are kept out of offload's home (``offload_home``: config.yaml, state.db,
logs) unless the workspace is that folder.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from offload.agent.prompts import subagent_system_prompt
from offload.agent.toolsets import DELEGATION_TOOLSET
from offload.toolsets.child_tools import DELEGATE_TOOL, role_tools, tools_of

DEFAULT_MAX_SPAWN_DEPTH = 1


@dataclass(frozen=True)
class ChildSettings:
    toolsets: list[str]
    role: str  # "leaf" or "orchestrator"; an orchestrator without delegation is a leaf
    system_prompt: str
    tools: list[str] = field(default_factory=list)  # the built-in tools the child may call
    tool_settings: dict[str, Any] = field(default_factory=dict)


def derive_child_settings(
    *,
    parent_toolsets: list[str],
    requested: list[str] | None,
    role: str,
    child_depth: int,
    settings: Mapping[str, Any],
    goal: str,
    context: str | None,
    task_index: int,
    workspace: Path,
) -> ChildSettings:
    if requested is None:
        toolsets = list(parent_toolsets)
    else:
        toolsets = [name for name in dict.fromkeys(requested) if name in parent_toolsets]
    may_delegate = (role == "orchestrator" and child_depth < max_spawn_depth(settings)
                    and DELEGATE_TOOL in role_tools(settings, "orchestrator"))
    if not may_delegate:
        toolsets = [name for name in toolsets if name != DELEGATION_TOOLSET]
    effective_role = "orchestrator" if may_delegate and DELEGATION_TOOLSET in toolsets else "leaf"
    tools = tools_of(toolsets, role_tools(settings, effective_role))
    prompt = subagent_system_prompt(
        goal=goal, context=context, task_index=task_index, role=effective_role, workspace=workspace, tools=tools,
    )
    return ChildSettings(toolsets=toolsets, role=effective_role, system_prompt=prompt, tools=tools,
                         tool_settings=_child_tool_settings(settings, workspace))


def _child_tool_settings(settings: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """The parent's tool settings, marked as a subagent's, plus the home its tools stay out of."""
    derived = {**settings, "subagent": True}  # e.g. its commands may leave no process running
    home = settings.get("offload_home")
    if home:
        protected = _protected_home(str(home), str(workspace), os.getcwd())
        if protected is not None:
            derived["protected_home"] = protected
    return derived


@functools.lru_cache(maxsize=64)
def _protected_home(home: str, workspace: str, cwd: str) -> str | None:
    """``home`` resolved, unless it is the workspace. Cached (``cwd`` in the key, for relative
    paths): resolving both walked every component with a system call, three quarters of the
    CPU of building a subagent, for the same two folders every time."""
    resolved = Path(home).resolve()
    return None if resolved == Path(workspace).resolve() else str(resolved)


def max_spawn_depth(settings: Mapping[str, Any]) -> int:
    raw = settings.get("max_spawn_depth", DEFAULT_MAX_SPAWN_DEPTH)
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(
            f"delegation.max_spawn_depth must be an integer, got {raw!r}; fix it in config.yaml"
        ) from None
