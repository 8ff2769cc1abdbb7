"""The ``delegate_task`` tool: entry point, config, credentials, the child seams and the result
entry of one child. The arguments and the schema live in ``delegate_args``, the child build and
run in ``delegate_children`` (on worker threads), the modes in ``delegate_tool_dispatch``.

Invariants: the tool never raises to the model — bad arguments, placeholder goals, bad config,
credential failures and anything unexpected come back as ``{"status": "error", "error": ...}``
JSON that says what to change, before anything is dispatched; routing identity is captured
before any child is built (building a child may rebind session state); a child never gets a
toolset its parent lacks; a child that raised is ``error``, one that ran and did not succeed
``failed``. ``_build_child_agent``, ``_run_single_child``, ``_resolve_delegation_credentials``
and ``_load_config`` are seams the acceptance suite patches (looked up at call time).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tools.delegate_args import DELEGATE_TASK_SCHEMA, KNOWN_TOOLSETS, DelegateArgs, TaskArgs
from tools.delegate_config import ConfigError, DelegationConfig, load_delegation_config
from tools.delegate_usage import entry_usage_fields
from tools.toolspec import Tool, ToolContext

logger = logging.getLogger(__name__)


@dataclass
class Batch:
    """One delegate_task call (or one completion unit of it): its tasks and where results go.

    ``children`` holds one slot per task this batch runs, ``None`` until the worker that runs
    the task has built its child; ``cancelled`` is set when the batch is stopped.
    """

    tasks: list[TaskArgs]
    children: list[Any]
    parent: Any
    cfg: DelegationConfig
    creds: dict[str, Any]
    context: str | None = None
    role: str = "leaf"
    indexes: list[int] = field(default_factory=list)  # task indexes this batch (or unit) runs
    group: str | None = None
    child_max_iterations: int = 50
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def goals(self) -> list[str]:
        return [t.goal for t in self.tasks]


def _error(message: str) -> str:
    return json.dumps({"status": "error", "error": message})


def _load_config() -> dict[str, Any]:
    """The validated ``delegation`` config as a dict (raises ConfigError)."""
    return load_delegation_config().model_dump()


def _get_max_async_children() -> int:
    try:
        return DelegationConfig.model_validate(_load_config()).max_concurrent_children
    except (ConfigError, ValidationError):
        return DelegationConfig().max_concurrent_children


def _str_attr(obj: Any, name: str) -> str | None:
    value = getattr(obj, name, None)
    return value if isinstance(value, str) and value else None


def _resolve_delegation_credentials(cfg: DelegationConfig, parent: Any) -> dict[str, Any]:
    """Model and endpoint of the children: ``delegation.*`` first, then the parent's."""
    base_url = cfg.base_url or _str_attr(parent, "base_url")
    if cfg.api_key_env:
        api_key = os.environ.get(cfg.api_key_env)
        if not api_key:
            raise ConfigError(f"delegation.api_key_env names {cfg.api_key_env}, which is not set; "
                              f"export {cfg.api_key_env}=<key> or remove the setting")
    elif cfg.base_url and cfg.base_url != _str_attr(parent, "base_url"):
        api_key = ""  # never send the parent's key to a different host ("" = no key, None = inherit)
    else:
        api_key = _str_attr(parent, "api_key")
    return {"model": cfg.model or _str_attr(parent, "model"), "provider": cfg.provider, "base_url": base_url,
            "api_key": api_key, "api_mode": None, "command": None, "args": None}


def _credentials_or_error(cfg: DelegationConfig, parent: Any) -> tuple[dict[str, Any], str | None]:
    """The children's credentials, or why they cannot be resolved (any failure, not only config)."""
    try:
        creds = _resolve_delegation_credentials(cfg, parent)
    except ConfigError as exc:
        return {}, str(exc)
    except Exception as exc:
        logger.warning("resolving delegation credentials failed", exc_info=True)
        return {}, (f"could not resolve the subagents' model or endpoint ({type(exc).__name__}: {exc}); nothing "
                    "was dispatched. The operator must fix delegation.model / base_url / api_key_env in "
                    "config.yaml (or the parent agent's own endpoint).")
    if not isinstance(creds, dict):
        return {}, (f"could not resolve the subagents' model or endpoint (got {type(creds).__name__}, not a "
                    "credentials mapping); nothing was dispatched. The operator must check delegation.* in config.yaml.")
    return creds, None


def _build_child_agent(*, task_index: int, goal: str, context: str | None, toolsets: list[str] | None, role: str,
                       creds: dict[str, Any], max_iterations: int, parent_agent: Any) -> Any:
    """The parent builds its own child, so tools/ never imports the agent runtime."""
    return parent_agent.build_child(task_index=task_index, goal=goal, context=context, toolsets=toolsets, role=role,
                                    model=creds.get("model"), base_url=creds.get("base_url"),
                                    api_key=creds.get("api_key"), max_iterations=max_iterations,
                                    subagent_id=f"sa-{task_index}-{os.urandom(3).hex()}")


def _child_prompt(goal: str, context: str | None) -> str:
    return f"{goal}\n\nContext from the parent agent:\n{context}" if context else goal


def _run_single_child(task_index: int, goal: str, child: Any = None, parent_agent: Any = None,
                      context: str | None = None, **_: Any) -> dict[str, Any]:
    """Run one child to the end and describe the outcome as a result entry."""
    started = time.monotonic()
    try:
        out = child.run_conversation(_child_prompt(goal, context))
    except Exception as exc:  # raised, as opposed to ran and failed: status "error"
        return _fabricated_entry(task_index, "error", f"{type(exc).__name__}: {exc}", child, started)
    summary = out.get("final_response")
    usable = isinstance(summary, str) and summary.strip() not in ("", "(empty)")
    if out.get("interrupted") or out.get("exit_reason") == "interrupted":
        status, exit_reason = "interrupted", "interrupted"
    elif out.get("error") or out.get("exit_reason") == "error":
        status, exit_reason = "failed", "error"
    else:
        exit_reason = "completed" if out.get("completed") else "max_iterations"
        status = "completed" if usable else "failed"
    entry = {"task_index": task_index, "status": status, "summary": summary if usable else None,
             "api_calls": int(out.get("api_calls") or 0), "duration_seconds": round(time.monotonic() - started, 2),
             "model": out.get("model") or _str_attr(child, "model"), "exit_reason": exit_reason,
             "truncated": exit_reason == "max_iterations", **entry_usage_fields(out)}
    if out.get("error"):
        entry["error"] = str(out["error"])
    elif status == "failed":
        entry["error"] = "the subagent ended without a usable summary"
    return entry


def _fabricated_entry(task_index: int, status: str, error: str, child: Any, started: float) -> dict[str, Any]:
    return {"task_index": task_index, "status": status, "summary": None, "api_calls": 0, "error": error,
            "duration_seconds": round(time.monotonic() - started, 2), "model": _str_attr(child, "model"),
            "exit_reason": "interrupted" if status == "interrupted" else "error", "truncated": False}


def delegate_task(goal: str | None = None, context: str | None = None, toolsets: list[str] | None = None,
                  tasks: list[dict[str, Any]] | None = None, background: bool | None = None,
                  max_iterations: int | None = None, role: str | None = None, parent_agent: Any = None,
                  **extra: Any) -> str:
    """Delegate one task (``goal``) or several (``tasks``) to subagents. Returns JSON text."""
    try:
        args = DelegateArgs(goal=goal, context=context, toolsets=toolsets, tasks=tasks, background=background,
                            max_iterations=max_iterations, role=role, **extra)
        task_list = args.task_list()
        cfg = DelegationConfig.model_validate(_load_config())
    except ValidationError as exc:
        return _error(_describe_validation(exc))
    except (ValueError, ConfigError) as exc:
        return _error(str(exc))
    if parent_agent is None:
        return _error("delegate_task has no parent agent: it must be called by an agent during its turn "
                      "(the tool passes the calling agent as parent_agent); nothing was dispatched")
    try:
        return json.dumps(_delegate(args, task_list, cfg, parent_agent), default=str)
    except ConfigError as exc:
        return _error(str(exc))
    except Exception as exc:  # the tool boundary: the model gets a reason, never a traceback
        logger.exception("delegate_task failed")
        return _error(f"delegate_task failed unexpectedly ({type(exc).__name__}: {exc}); nothing more was "
                      "started. Retry once; if it fails again, do the work yourself and tell the user.")


def _describe_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        msg = "unexpected argument; remove it" if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    return "invalid delegate_task arguments: " + "; ".join(parts)


def _delegate(args: DelegateArgs, task_list: list[TaskArgs], cfg: DelegationConfig, parent: Any) -> dict[str, Any]:
    from tools import delegate_tool_dispatch as dispatch

    depth = getattr(parent, "_delegate_depth", 0)
    depth = depth if isinstance(depth, int) else 0
    if depth >= cfg.max_spawn_depth:
        return {"status": "error", "error": f"depth limit reached: this agent is at spawn depth {depth} and "
                f"delegation.max_spawn_depth={cfg.max_spawn_depth}, so it cannot delegate further; do the work "
                "yourself (the operator can raise delegation.max_spawn_depth)"}
    if len(task_list) > cfg.max_concurrent_children:
        return {"status": "error", "error": f"{len(task_list)} tasks exceed delegation.max_concurrent_children="
                f"{cfg.max_concurrent_children}; split the call or raise the key"}
    creds, problem = _credentials_or_error(cfg, parent)
    if problem:
        return {"status": "error", "error": problem}
    background = args.background if args.background is not None else (cfg.background and depth == 0)
    routing = dispatch.capture_routing(parent) if background else None  # before any child is built
    # Children are built later, each on the worker that runs it (tools/delegate_children.py).
    batch = Batch(tasks=task_list, children=[None] * len(task_list), parent=parent, cfg=cfg, creds=creds,
                  context=args.context, role=args.role or "leaf", indexes=list(range(len(task_list))),
                  child_max_iterations=args.max_iterations or cfg.max_iterations)
    if routing is None:
        return dispatch.run_sync(batch)
    if routing["async_delivery"] and cfg.run_on == "workers":
        from tools.delegate_queue import queue_units
        return queue_units(batch, dispatch._units_of(batch), routing)  # an `offload worker` on any host runs it
    if not routing["async_delivery"]:
        return dispatch.run_sync(batch, note="no_async")
    return dispatch.dispatch_background(batch, routing)


def _tool_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    return delegate_task(**args, parent_agent=ctx.caller)


TOOLS = [Tool(DELEGATE_TASK_SCHEMA["name"], "delegation", DELEGATE_TASK_SCHEMA["description"],
              DELEGATE_TASK_SCHEMA["parameters"], _tool_handler)]
