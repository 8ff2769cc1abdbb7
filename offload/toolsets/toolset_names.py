"""The built-in toolsets: each name an agent can be configured with, and the module that
provides it. One source for the registry (``offload/agent/toolsets.py``) and for ``delegate_task``'s
argument validation and schema, which used to keep their own copies of the names.

``delegation`` has no module here: its ``delegate_task`` is bound to one runtime's engine, so
the runtime (``offload.runtime.Offload``) hands it to each agent it builds."""
from __future__ import annotations

BUILTIN_TOOLSET_MODULES: dict[str, str] = {
    "terminal": "offload.toolsets.terminal_tool",
    "file": "offload.toolsets.file_tools",
    "web": "offload.toolsets.web_tool",
}
DELEGATION_TOOLSET = "delegation"
KNOWN_TOOLSETS: tuple[str, ...] = (*BUILTIN_TOOLSET_MODULES, DELEGATION_TOOLSET)

# A subagent's delegation lineage (``offload.subagents.lineage``) reaches its terminal tool as
# this setting, and every command it runs as this variable: an `offload run` started there
# stays in the same delegation tree (root session, depth, budgets).
LINEAGE_SETTING = "delegation_lineage"
LINEAGE_ENV = "OFFLOAD_DELEGATION_LINEAGE"
