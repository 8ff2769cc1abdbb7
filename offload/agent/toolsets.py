"""The toolset registry: toolset name → loader of its ``Tool`` list.

Owns the mapping from the names an agent is configured with ("terminal", "file", "web",
"delegation", plus any registered at run time) to the tools themselves. Invariant: loaders
import their module lazily, so naming a toolset never imports a tool module; an unknown name is
a ValueError that lists the valid ones. ``delegation`` is known here but provided by the
runtime that builds the agent (its ``delegate_task`` is bound to that runtime's engine), so
this package never imports the subagents package.
"""
from __future__ import annotations

import importlib
import threading
from typing import Callable, Iterable, Mapping

from offload.toolsets.toolset_names import BUILTIN_TOOLSET_MODULES, DELEGATION_TOOLSET
from offload.toolsets.toolset_names import KNOWN_TOOLSETS  # noqa: F401 - re-exported
from offload.toolsets.toolspec import Tool

ToolLoader = Callable[[], list[Tool]]

_BUILTIN_MODULES = BUILTIN_TOOLSET_MODULES


def _module_loader(module_name: str) -> ToolLoader:
    def load() -> list[Tool]:
        return list(importlib.import_module(module_name).TOOLS)

    return load


def _from_the_runtime() -> list[Tool]:
    raise ValueError("the delegation toolset (delegate_task) comes from an offload runtime: build the agent "
                     "through offload.Offload (e.g. Offload.build_agent), or pass provided_toolsets="
                     "{'delegation': ...} to AIAgent")


_registry_lock = threading.Lock()
_LOADERS: dict[str, ToolLoader] = {name: _module_loader(module) for name, module in _BUILTIN_MODULES.items()}
_LOADERS[DELEGATION_TOOLSET] = _from_the_runtime


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
        elif name == DELEGATION_TOOLSET:
            _LOADERS[name] = _from_the_runtime
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


def resolve_tools(toolset_names: Iterable[str], provided: Mapping[str, ToolLoader] | None = None) -> list[Tool]:
    """Load the tools of every named toolset, in order; ``provided`` (e.g. the runtime's
    ``delegation``) wins over the registry. Two tools with one name is an error, because the
    model could not say which one it means."""
    names = validate_toolsets(toolset_names)
    provided = provided or {}
    with _registry_lock:
        loaders = [(name, provided.get(name) or _LOADERS[name]) for name in names]
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
