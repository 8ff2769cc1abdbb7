"""The toolset registry: toolset name → loader of its ``Tool`` list.

Owns the mapping from the names an agent is configured with ("terminal", "file", "web",
"delegation", plus any registered at run time) to the tools themselves. Invariant: loaders
import their module lazily, so naming a toolset never imports a tool module (and
``offload.subagents.tool``, which needs this package, cannot form an import cycle with it); an
unknown name is a ValueError that lists the valid ones.
"""
from __future__ import annotations

import importlib
import threading
from typing import Callable, Iterable

from offload.toolsets.toolset_names import BUILTIN_TOOLSET_MODULES, KNOWN_TOOLSETS  # noqa: F401 - re-exported
from offload.toolsets.toolspec import Tool

ToolLoader = Callable[[], list[Tool]]

_BUILTIN_MODULES = BUILTIN_TOOLSET_MODULES
DELEGATION_TOOLSET = "delegation"


def _module_loader(module_name: str) -> ToolLoader:
    def load() -> list[Tool]:
        return list(importlib.import_module(module_name).TOOLS)

    return load


_registry_lock = threading.Lock()
_LOADERS: dict[str, ToolLoader] = {name: _module_loader(module) for name, module in _BUILTIN_MODULES.items()}


def register_toolset(name: str, loader: ToolLoader) -> None:
    """Add (or replace) a toolset; ``loader`` is called each time the toolset is resolved."""
    if not name or not isinstance(name, str):
        raise ValueError("a toolset needs a non-empty string name")
    with _registry_lock:
        _LOADERS[name] = loader


def unregister_toolset(name: str) -> None:
    """Remove a registered toolset; built-in names are restored to their default loader."""
    with _registry_lock:
        if name in _BUILTIN_MODULES:
            _LOADERS[name] = _module_loader(_BUILTIN_MODULES[name])
        else:
            _LOADERS.pop(name, None)


def available_toolsets() -> tuple[str, ...]:
    with _registry_lock:
        return tuple(_LOADERS)


def validate_toolsets(names: Iterable[str]) -> list[str]:
    """The names in order without duplicates; ValueError naming the valid ones on a typo."""
    if isinstance(names, str):
        raise ValueError(f"toolsets must be a list of names such as [{names!r}], not a single string")
    valid = available_toolsets()
    result: list[str] = []
    for name in names:
        if name not in valid:
            raise ValueError(f"unknown toolset {name!r}; valid toolsets are: {', '.join(valid)}")
        if name not in result:
            result.append(name)
    return result


def resolve_tools(toolset_names: Iterable[str]) -> list[Tool]:
    """Load the tools of every named toolset, in order. Two tools with one name is an error,
    because the model could not say which one it means."""
    names = validate_toolsets(toolset_names)
    with _registry_lock:
        loaders = [(name, _LOADERS[name]) for name in names]
    tools: list[Tool] = []
    owner_by_tool: dict[str, str] = {}
    for toolset, loader in loaders:
        for tool in loader():
            if tool.name in owner_by_tool:
                raise ValueError(
                    f"tool {tool.name!r} is defined by both toolset {owner_by_tool[tool.name]!r} "
                    f"and {toolset!r}; rename one of them"
                )
            owner_by_tool[tool.name] = toolset
            tools.append(tool)
    return tools
