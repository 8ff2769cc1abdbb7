"""hermes path ``tools.delegate_tool``: ``delegate_task`` on the default runtime, with the
seams the acceptance suite patches, each looked up here when used: ``_load_config`` (the
``delegation`` section of ``$HERMES_HOME/config.yaml``, read per call), ``_resolve_delegation_credentials``,
``_build_child_agent`` and ``_run_single_child`` (a patch reaches units already dispatched).
"""
from __future__ import annotations

from typing import Any

from offload.subagents.args import DELEGATE_TASK_SCHEMA, KNOWN_TOOLSETS, DelegateArgs, TaskArgs  # noqa: F401
from offload.subagents.child import Batch  # noqa: F401 - re-exported
from offload.subagents.child import build_child_agent as _build_child_agent  # the seam, patched here
from offload.subagents.child import run_single_child as _run_single_child  # the seam, patched here
from offload.subagents.config import load_delegation_config
from offload.subagents.tool import resolve_delegation_credentials as _resolve_delegation_credentials  # the seam
from offload.toolsets.toolspec import Tool, ToolContext


def _load_config() -> dict[str, Any]:
    """The validated ``delegation`` config of the current home, as a dict (raises ConfigError)."""
    return load_delegation_config().model_dump()


def delegate_task(goal: str | None = None, context: str | None = None, toolsets: list[str] | None = None,
                  tasks: list[dict[str, Any]] | None = None, background: bool | None = None,
                  max_iterations: int | None = None, role: str | None = None, parent_agent: Any = None,
                  **extra: Any) -> str:
    """Delegate one task (``goal``) or several (``tasks``) to subagents. Returns JSON text."""
    from tools.async_delegation import runtime

    return runtime().delegate_tool(goal=goal, context=context, toolsets=toolsets, tasks=tasks,
                                   background=background, max_iterations=max_iterations, role=role,
                                   parent_agent=parent_agent, **extra)


def _tool_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    return delegate_task(**args, parent_agent=ctx.caller)


TOOLS = [Tool(DELEGATE_TASK_SCHEMA["name"], "delegation", DELEGATE_TASK_SCHEMA["description"],
              DELEGATE_TASK_SCHEMA["parameters"], _tool_handler)]
