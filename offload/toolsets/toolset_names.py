"""The built-in toolsets: each name an agent can be configured with, and the module that
provides it. One source for the registry (``agent/toolsets.py``) and for ``delegate_task``'s
argument validation and schema, which used to keep their own copies of the names."""
from __future__ import annotations

BUILTIN_TOOLSET_MODULES: dict[str, str] = {
    "terminal": "offload.toolsets.terminal_tool",
    "file": "offload.toolsets.file_tools",
    "web": "offload.toolsets.web_tool",
    "delegation": "offload.subagents.tool",
}
KNOWN_TOOLSETS: tuple[str, ...] = tuple(BUILTIN_TOOLSET_MODULES)
