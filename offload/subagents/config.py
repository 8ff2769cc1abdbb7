"""The ``delegation:`` section of ``$HERMES_HOME/config.yaml``, validated.

A bad file or key never crashes a turn and never silently falls back: ``ConfigError`` names
the file, the key, what is wrong and how to fix it, and ``delegate_task`` hands that text to
the model (and so to the user).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from offload.engine.policy import DEFAULTS as STALL
from offload.errors import ConfigError
from offload.home import config_path, read_config_file
from offload.subagents.approvals import validate_by_category
from offload.toolsets.child_tools import DEFAULT_LEAF_TOOLS, DEFAULT_ORCHESTRATOR_TOOLS, validate_tool_list

logger = logging.getLogger(__name__)


class DelegationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_concurrent_children: int = Field(10, ge=1, le=256, description="tasks per call, and background slots")
    independent_completions: bool = Field(False, description="one completion per group / ungrouped task")
    background: bool = Field(True, description="top-level delegate_task calls run in the background by default")
    model: str | None = Field(None, description="subagent model; default: the parent's")
    provider: str | None = Field(None, description="label of the subagent provider, shown in notices")
    base_url: str | None = Field(None, description="subagent endpoint; default: the parent's")
    api_key_env: str | None = Field(None, description="environment variable holding the subagent API key")
    max_iterations: int = Field(50, ge=1, le=10_000, description="API calls per subagent")
    max_spawn_depth: int = Field(1, ge=0, le=5, description="how deep subagents may delegate")
    leaf_tools: list[str] = Field(default_factory=lambda: list(DEFAULT_LEAF_TOOLS), description=(
        "the tools a leaf subagent may use (of the toolsets it is given); none talks to the user or outlives it"))
    orchestrator_tools: list[str] = Field(default_factory=lambda: list(DEFAULT_ORCHESTRATOR_TOOLS), description=(
        "the tools an orchestrator subagent may use; delegate_task only within max_spawn_depth"))
    max_result_chain: int = Field(3, ge=0, le=100, description=(
        "how many times in a row a delivered background result may start new background work (0: never)"))
    max_tokens_per_delegation: int | None = Field(None, ge=1, description=(
        "tokens (prompt + completion, as servers report them) the subagents of one delegate_task call may use "
        "together; a child at the budget stops with its partial result (null: no budget)"))
    max_tokens_per_session: int | None = Field(None, ge=1, description=(
        "tokens one parent session's subagents may use; past it delegate_task refuses (null: no budget)"))
    max_tokens_per_day: int | None = Field(None, ge=1, description=(
        "tokens all subagents of this home may use per UTC day; past it delegate_task refuses (null: no budget)"))
    max_cost_usd_per_delegation: float | None = Field(None, gt=0, le=1_000_000, description=(
        "US dollars the subagents of one delegate_task call may spend together, as the provider reports the cost "
        "(OpenRouter's usage.cost); a child at the cap stops with its partial result. While any max_cost_usd_* "
        "is set, a model call whose cost is not reported stops its child too: unknown is never taken as 0 "
        "(null: no cap)"))
    max_cost_usd_per_session: float | None = Field(None, gt=0, le=1_000_000, description=(
        "US dollars one parent session's subagents may spend; past it (or with a cost not reported) delegate_task "
        "refuses (null: no cap)"))
    max_cost_usd_per_day: float | None = Field(None, gt=0, le=1_000_000, description=(
        "US dollars all subagents of this home may spend per UTC day; past it (or with a cost not reported) "
        "delegate_task refuses (null: no cap)"))
    max_summary_chars: int = Field(24_000, ge=200, description="cap on a subagent's summary")
    stream_idle_timeout_s: float | None = Field(None, gt=0, le=86_400, description=(
        "seconds a subagent's model call may receive nothing before it fails; default: the parent's "
        "stream_idle_timeout_s"))
    fallback_providers: list[Any] = Field(default_factory=list)
    max_async_children: int | None = Field(None, description="deprecated and ignored")
    resume: Literal["auto", "never"] = Field("auto", description=(
        "auto: a background child of offload's own agent loop logs its steps and, if its process dies, continues "
        "from its last step in the next long-lived offload process on its ledger; never: no step log, and it is "
        "reported unknown"))
    max_resumes: int = Field(3, ge=0, le=100, description="times one unit may be resumed after its owner died; "
                             "then it is reported unknown with that reason")
    run_on: Literal["local", "workers"] = Field("local", description="local: background units run in this process; "
                                                "workers: queued in the PostgreSQL ledger for `offload worker`")
    at_capacity: Literal["queue", "refuse", "inline"] = Field("queue", description=(
        "a background call while max_concurrent_children units run: queue (wait its turn, started in order "
        "when a slot frees), refuse (an error to the agent), inline (run now, blocking the parent)"))
    max_queued: int = Field(100, ge=0, le=100_000, description=(
        "units waiting in the admission queue of this ledger, all sessions together; past it a call is refused"))
    max_queued_per_session: int = Field(20, ge=0, le=100_000, description=(
        "units one session may have waiting in the admission queue; past it its calls are refused"))
    approvals: Literal["deny", "allow", "ask"] = Field("deny", description=(
        "what a subagent's risky terminal command does (destructive, privilege, network, package_install, "
        "outside_workspace, unparseable): deny (a tool error naming the category), allow (it runs), ask (a "
        "person answers: offload approvals, the chat, the dashboard; the child waits)"))
    approvals_by_category: dict[str, Literal["deny", "allow", "ask"]] = Field(default_factory=dict, description=(
        "per category, a mode over delegation.approvals, e.g. {package_install: ask, network: allow}"))
    approval_timeout_s: float = Field(300.0, gt=0, le=86_400, description=(
        "seconds a subagent waits for an answer to an approval request; then it is denied"))
    # Stall monitor tuning; a frontend applies these to the engine when it starts.
    stall_idle_seconds: float = Field(STALL.stall_idle_s, gt=0, description="no progress this long (not in a tool) = stalled")
    stall_in_tool_seconds: float = Field(STALL.stall_in_tool_s, gt=0,
                                         description="no progress this long inside a tool = stalled")
    stall_grace_seconds: float = Field(STALL.stall_grace_s, ge=0,
                                       description="after the interrupt, wait this long, then report it")
    stall_check_interval_seconds: float = Field(STALL.stall_check_interval_s, gt=0,
                                                description="how often the stall monitor looks")

    @field_validator("leaf_tools")
    @classmethod
    def _leaf_tools(cls, value: list[str]) -> list[str]:
        return validate_tool_list(value, "leaf")

    @field_validator("approvals_by_category")
    @classmethod
    def _approvals_by_category(cls, value: dict[str, str]) -> dict[str, str]:
        return validate_by_category(value)

    @field_validator("orchestrator_tools")
    @classmethod
    def _orchestrator_tools(cls, value: list[str]) -> list[str]:
        return validate_tool_list(value, "orchestrator")


def _format_validation(path: Path, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        key = "delegation." + ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            known = ", ".join(DelegationConfig.model_fields)
            problems.append(f"{key}: unknown key; remove it (known keys: {known})")
        else:
            problems.append(f"{key}: {err['msg']} (got {err.get('input')!r})")
    return f"{path}: " + "; ".join(problems) + ". Fix the file or run `offload config set KEY VALUE`."


def load_delegation_config(path: Path | None = None) -> DelegationConfig:
    path = path or config_path()
    section = read_config_file(path).get("delegation") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: `delegation` must be a mapping of keys, got {type(section).__name__}")
    try:
        cfg = DelegationConfig.model_validate(section)
    except ValidationError as exc:
        raise ConfigError(_format_validation(path, exc)) from exc
    return _apply_env(cfg)


def _apply_env(cfg: DelegationConfig) -> DelegationConfig:
    if cfg.max_async_children is not None:
        logger.warning("delegation.max_async_children is deprecated and ignored; "
                       "delegation.max_concurrent_children now caps background delegations too")
    raw = os.environ.get("DELEGATION_MAX_CONCURRENT_CHILDREN", "").strip()
    if raw and "max_concurrent_children" not in cfg.model_fields_set:
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(f"DELEGATION_MAX_CONCURRENT_CHILDREN must be a whole number of at least 1, got {raw!r}")
        cfg = cfg.model_copy(update={"max_concurrent_children": int(raw)})
    return cfg
