"""How a subagent is derived from its parent: toolsets, role and system prompt.

Owns ``derive_child_settings``, a pure function. Invariants: a child's toolsets are a subset
of its parent's (requested ∩ parent, or the parent's when none are requested), and the
``delegation`` toolset is removed once the child's depth reaches ``max_spawn_depth``
(setting, default 1), so delegation can never recurse without bound.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from offload.agent.prompts import subagent_system_prompt
from offload.agent.toolsets import DELEGATION_TOOLSET

DEFAULT_MAX_SPAWN_DEPTH = 1


@dataclass(frozen=True)
class ChildSettings:
    toolsets: list[str]
    role: str  # "leaf" or "orchestrator"; an orchestrator without delegation is a leaf
    system_prompt: str


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
    if child_depth >= max_spawn_depth(settings):
        toolsets = [name for name in toolsets if name != DELEGATION_TOOLSET]
    effective_role = "orchestrator" if role == "orchestrator" and DELEGATION_TOOLSET in toolsets else "leaf"
    prompt = subagent_system_prompt(
        goal=goal, context=context, task_index=task_index, role=effective_role, workspace=workspace,
    )
    return ChildSettings(toolsets=toolsets, role=effective_role, system_prompt=prompt)


def max_spawn_depth(settings: Mapping[str, Any]) -> int:
    raw = settings.get("max_spawn_depth", DEFAULT_MAX_SPAWN_DEPTH)
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(
            f"delegation.max_spawn_depth must be an integer, got {raw!r}; fix it in config.yaml"
        ) from None
