"""The ``delegate_task`` tool, bound to one engine: ``DelegateTool(engine, ledger, seams)`` is
what an agent calls (``tool``) and what the runtime exposes. The arguments and the schema live
in ``args``; the unit and one child's build, run and result entry in ``child``; running a
unit's children in ``children`` (on worker threads); the modes in ``dispatch``. Imports point
one way: this module imports those, none of them imports it.

Invariants: the tool never raises to the model — bad arguments, placeholder goals, bad config,
credential failures and anything unexpected come back as ``{"status": "error", "error": ...}``
JSON that says what to change, before anything is dispatched; routing identity is captured
before any child is built (building a child may rebind session state); a child never gets a
toolset its parent lacks; a child that raised is ``error``, one that ran and did not succeed
``failed``; a session or day over its token or cost budget is refused before anything is built, and a
call's children share its delegation budget (``budget``); a subagent's own call inherits its
lineage (``lineage``): spend booked to the root session and charged to every ancestor's budget,
the depth counted from the root, and the tree's running agents capped by
max_concurrent_children. Where a call gets its config, credentials and children is ``Seams``:
the runtime's own, or the hermes adapter's patchable names, each called per use.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from pydantic import ValidationError

from offload.context import result_chain
from offload.context.approval import current_no_ask_reason
from offload.subagents import lineage
from offload.subagents.approvals import ApprovalGate, ApprovalPolicy
from offload.subagents.args import DELEGATE_TASK_SCHEMA, DelegateArgs, TaskArgs
from offload.subagents.budget import SpendStore, call_budget, over_budget
from offload.subagents.child import Batch, build_child_agent, finalize_child_results, run_single_child
from offload.subagents.child import str_attr as _str_attr
from offload.subagents.config import ConfigError, DelegationConfig
from offload.toolsets.toolspec import Tool, ToolContext

if TYPE_CHECKING:
    from offload.engine.engine import Delegations
    from offload.ledger import DelegationLedger
    from offload.subagents.dispatch import AdmissionQueue

logger = logging.getLogger(__name__)


def _error(message: str) -> str:
    return json.dumps({"status": "error", "error": message})


def resolve_delegation_credentials(cfg: DelegationConfig, parent: Any) -> dict[str, Any]:
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
            "api_key": api_key, "api_mode": None, "command": None, "args": None,
            "stream_idle_timeout_s": cfg.stream_idle_timeout_s}  # None: the parent's


@dataclass(frozen=True)
class Seams:
    """Where a delegate_task call gets its ``delegation`` config (a ``DelegationConfig`` or its
    dict), the children's credentials, each child's build and run, and a unit's public result
    entries. Each is called per use."""

    load_config: Callable[[], DelegationConfig | Mapping[str, Any]]
    resolve_credentials: Callable[[DelegationConfig, Any], dict[str, Any]] = resolve_delegation_credentials
    build_child: Callable[..., Any] = build_child_agent
    run_child: Callable[..., dict[str, Any]] = run_single_child
    finalize_results: Callable[[list[dict[str, Any]], Batch], list[dict[str, Any]]] = finalize_child_results


def _credentials_or_error(seams: Seams, cfg: DelegationConfig, parent: Any) -> tuple[dict[str, Any], str | None]:
    """The children's credentials, or why they cannot be resolved (any failure, not only config)."""
    try:
        creds = seams.resolve_credentials(cfg, parent)
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


class DelegateTool:
    """``delegate_task`` over one engine (``Delegations``) and its ledger (``ledger()``, per use)."""

    def __init__(self, engine: Delegations, ledger: Callable[[], DelegationLedger], seams: Seams,
                 spend: SpendStore | None = None) -> None:
        self.engine, self.ledger, self.seams = engine, ledger, seams
        self.admission: AdmissionQueue | None = None  # the runtime's queue (delegation.at_capacity: queue)
        self.spend = spend  # where subagents' tokens are counted per session and day (None: not counted)
        # Whether a person can answer approval requests of this process's subagents (None: yes,
        # through the ledger) and a surface told of each request (``Offload.set_approval_surface``).
        self.no_ask_reason: str | None = None
        self.on_approval_request: Callable[[dict[str, Any]], Any] | None = None
        self.tool = Tool(DELEGATE_TASK_SCHEMA["name"], "delegation", DELEGATE_TASK_SCHEMA["description"],
                         DELEGATE_TASK_SCHEMA["parameters"], self._handle)

    def delegation_config(self) -> DelegationConfig:
        """The ``delegation`` settings as configured now (read per use: the home may change)."""
        return DelegationConfig.model_validate(self.seams.load_config())

    def _handle(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return self(**args, parent_agent=ctx.caller)

    def __call__(self, goal: str | None = None, context: str | None = None, toolsets: list[str] | None = None,
                 tasks: list[dict[str, Any]] | None = None, background: bool | None = None,
                 max_iterations: int | None = None, role: str | None = None, parent_agent: Any = None,
                 **extra: Any) -> str:
        """Delegate one task (``goal``) or several (``tasks``) to subagents. Returns JSON text."""
        try:
            args = DelegateArgs(goal=goal, context=context, toolsets=toolsets, tasks=tasks, background=background,
                                max_iterations=max_iterations, role=role, **extra)
            task_list = args.task_list()
            cfg = self.delegation_config()
        except ValidationError as exc:
            return _error(_describe_validation(exc))
        except (ValueError, ConfigError) as exc:
            return _error(str(exc))
        if parent_agent is None:
            return _error("delegate_task has no parent agent: it must be called by an agent during its turn "
                          "(the tool passes the calling agent as parent_agent); nothing was dispatched")
        try:
            return json.dumps(self._delegate(args, task_list, cfg, parent_agent), default=str)
        except ConfigError as exc:
            return _error(str(exc))
        except Exception as exc:  # the tool boundary: the model gets a reason, never a traceback
            logger.exception("delegate_task failed")
            return _error(f"delegate_task failed unexpectedly ({type(exc).__name__}: {exc}); nothing more was "
                          "started. Retry once; if it fails again, do the work yourself and tell the user.")

    def batch(self, **fields: Any) -> Batch:
        """A unit with this tool's seams (``build_child``, ``run_child``, ``finalize_results``)."""
        if "approvals" not in fields and isinstance(fields.get("cfg"), DelegationConfig):
            fields["approvals"] = ApprovalGate(ApprovalPolicy.of(fields["cfg"]), self.ledger,
                                               _str_attr(fields.get("parent"), "session_id") or "",
                                               no_ask_reason=current_no_ask_reason(self.no_ask_reason),
                                               on_request=self.on_approval_request)
        return Batch(build_child=self.seams.build_child, run_child=self.seams.run_child,
                     finalize_results=self.seams.finalize_results, **fields)

    def _delegate(self, args: DelegateArgs, task_list: list[TaskArgs], cfg: DelegationConfig,
                  parent: Any) -> dict[str, Any]:
        inherited = lineage.of_agent(parent)  # a subagent's call: its tree's root session, depth and budget
        depth = getattr(parent, "_delegate_depth", 0)
        depth = max(depth if isinstance(depth, int) else 0, inherited.depth if inherited else 0)
        if depth >= cfg.max_spawn_depth:
            return {"status": "error", "error": f"depth limit reached: this agent is at spawn depth {depth} and "
                    f"delegation.max_spawn_depth={cfg.max_spawn_depth}, so it cannot delegate further; do the work "
                    "yourself (the operator can raise delegation.max_spawn_depth)"}
        if len(task_list) > cfg.max_concurrent_children:
            return {"status": "error", "error": f"{len(task_list)} tasks exceed delegation.max_concurrent_children="
                    f"{cfg.max_concurrent_children}; split the call or raise the key"}
        session_key = inherited.session_key if inherited else _str_attr(parent, "session_id") or ""
        refusal = over_budget(cfg, self.spend, session_key)
        if refusal:
            return {"status": "error", "error": refusal}
        creds, problem = _credentials_or_error(self.seams, cfg, parent)
        if problem:
            return {"status": "error", "error": problem}
        background = args.background if args.background is not None else (cfg.background and depth == 0)
        hops = result_chain.next_hops()
        if background and hops > cfg.max_result_chain:
            return {"status": "error", "error": _chain_refusal(hops, cfg.max_result_chain)}
        live = inherited.live if inherited else lineage.LiveCount(cfg.max_concurrent_children)
        if not live.reserve(len(task_list)):
            return {"status": "error", "error": _tree_refusal(len(task_list), live, cfg.max_concurrent_children)}
        budget = call_budget(cfg, self.spend, session_key, parent=inherited.budget if inherited else None)
        try:
            result = self._dispatch(args, task_list, cfg, parent, creds, background, hops, budget,
                                    lineage.Lineage(session_key, depth + 1, live, budget))
        except BaseException:
            live.release(len(task_list))
            raise
        if result.get("status") == "error" or result.get("run_on") == "workers":  # nothing runs here
            live.release(len(task_list))
        return result

    def _dispatch(self, args: DelegateArgs, task_list: list[TaskArgs], cfg: DelegationConfig, parent: Any,
                  creds: dict[str, Any], background: bool, hops: int, budget: Any,
                  below: lineage.Lineage) -> dict[str, Any]:
        from offload.subagents import dispatch  # the engine's dispatch loads only when a call delegates

        origin = dispatch.capture_origin(parent) if background else None  # before any child is built
        # Children are built later, each on the worker that runs it (offload.subagents.children).
        batch = self.batch(tasks=task_list, children=[None] * len(task_list), parent=parent, cfg=cfg, creds=creds,
                           context=args.context, role=args.role or "leaf", indexes=list(range(len(task_list))),
                           child_max_iterations=args.max_iterations or cfg.max_iterations, result_hops=hops,
                           budget=budget, lineage=below)
        if not background:
            return dispatch.run_sync(batch)
        if origin is None:
            return dispatch.run_sync(batch, note="no_async")
        if cfg.run_on == "workers":
            from offload.subagents.queue import queue_units
            # an `offload worker` on any host runs it
            return queue_units(self.ledger(), self.engine.new_id, batch, dispatch.units_of(batch), origin)
        return dispatch.dispatch_background(self.engine, batch, origin, self.admission)


def _describe_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        msg = "unexpected argument; remove it" if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    return "invalid delegate_task arguments: " + "; ".join(parts)


def _tree_refusal(tasks: int, live: Any, cap: int) -> str:
    return (f"not dispatched: {live.running} subagent(s) of this delegation tree are running, and {tasks} more would "
            f"pass delegation.max_concurrent_children={cap}, which counts every level (nested inline calls too). "
            "Do this part yourself, or delegate fewer tasks once some finish; the operator can raise the key")


def _chain_refusal(hops: int, limit: int) -> str:
    return (f"not dispatched: this turn answers a background result, and {hops - 1} result(s) in a row have "
            f"already started new background work (delegation.max_result_chain={limit}), so no more is started "
            "from here. Answer from the results you have; for a small follow-up, do it yourself or delegate it with "
            "background=false. The operator can raise the limit: offload config set delegation.max_result_chain "
            f"{limit + 2}")
