"""Which tools a subagent may hold, per role: the catalogue of built-in tool names and the two
declared lists, ``delegation.leaf_tools`` and ``delegation.orchestrator_tools``.

A background child runs with nobody watching, so what it may use is declared by the operator,
one list per role, and a child gets exactly the tools of its list that its toolsets provide.
Invariants: every name on a list is a built-in tool in ``TOOLS_BY_TOOLSET``; none of those talks
to the user or to other people or outlives the child (a tool that would is never added here);
``delegate_task`` is on the orchestrator list only (a leaf does the work itself), and the depth
limit still takes it away (``offload.agent.child``). Cheap to import: config validation uses it.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from offload.toolsets.toolset_names import DELEGATION_TOOLSET

# Pinned against the tool modules by tests/toolsets/test_child_tools.py.
TOOLS_BY_TOOLSET: dict[str, tuple[str, ...]] = {
    "file": ("read_file", "write_file", "patch_file", "search_files", "list_files"),
    "terminal": ("run_command",),
    "web": ("fetch_url",),
    DELEGATION_TOOLSET: ("delegate_task",),
}
DELEGATE_TOOL = "delegate_task"
ROLES = ("leaf", "orchestrator")
ROLE_KEYS = {"leaf": "delegation.leaf_tools", "orchestrator": "delegation.orchestrator_tools"}
DEFAULT_LEAF_TOOLS: tuple[str, ...] = tuple(
    name for names in TOOLS_BY_TOOLSET.values() for name in names if name != DELEGATE_TOOL)
DEFAULT_ORCHESTRATOR_TOOLS: tuple[str, ...] = (*DEFAULT_LEAF_TOOLS, DELEGATE_TOOL)
SETTING = "child_tools"  # the agents' tool settings carry {role: [names]} under this key


def known_tools() -> list[str]:
    return [name for names in TOOLS_BY_TOOLSET.values() for name in names]


def validate_tool_list(names: Iterable[str], role: str) -> list[str]:
    """``names`` in order without duplicates; ValueError naming the problem and the valid names."""
    if isinstance(names, str):
        raise ValueError(f"must be a list of tool names such as [{names}], not a single string")
    result: list[str] = []
    for name in names:
        if name not in known_tools():
            raise ValueError(f"unknown tool {name!r}; a subagent's tools are chosen from: {', '.join(known_tools())}")
        if name == DELEGATE_TOOL and role == "leaf":
            raise ValueError("delegate_task is for orchestrators (a leaf does the work itself); "
                             "put it on delegation.orchestrator_tools")
        if name not in result:
            result.append(name)
    return result


def role_tools(settings: Mapping[str, Any], role: str) -> list[str]:
    """The declared list of ``role`` from an agent's tool settings (defaults when not given)."""
    lists = settings.get(SETTING) or {}
    default = DEFAULT_ORCHESTRATOR_TOOLS if role == "orchestrator" else DEFAULT_LEAF_TOOLS
    return list(lists.get(role) or default)


def tools_of(toolsets: Iterable[str], allowed: Iterable[str]) -> list[str]:
    """The built-in tools of ``toolsets`` that are on ``allowed``, in catalogue order."""
    allowed_set = set(allowed)
    return [name for toolset in toolsets for name in TOOLS_BY_TOOLSET.get(toolset, ()) if name in allowed_set]


def allowed_only(tools: list[Any], allowed: Iterable[str]) -> list[Any]:
    """``tools`` without the built-in ones off ``allowed``; a tool of a toolset registered in code
    (``register_toolset``) is the embedding program's to give, so it stays."""
    allowed_set, builtin = set(allowed), set(known_tools())
    return [tool for tool in tools if tool.name in allowed_set or tool.name not in builtin]


def blocked_tool_message(name: str, role: str, tools: list[str]) -> str:
    """The tool error a subagent reads when it calls a tool it does not have."""
    have = ", ".join(tools) or "(none)"
    what = f"{name!r} is not available to a subagent" if name in known_tools() else f"unknown tool {name!r} for a subagent"
    return (f"Error: {what} (role {role}). A subagent may use only: {have} "
            f"(the operator's list {ROLE_KEYS.get(role, ROLE_KEYS['leaf'])}, within the toolsets it was given). "
            "It cannot ask the user, message anyone or start work that outlives it. Continue with these tools, "
            "or say in your final answer what you could not do.")
