"""``Offload``: the composition root. One instance owns, for one data home and one ledger, the
ledger, the completion bus, the engine (``Delegations``), durable delivery (``Deliveries``),
the ``delegate_task`` tool bound to that engine, and the background loops of the process (the
engine's stall loop, the owner loop, and the PostgreSQL lease/listen/outbox threads the ledger
runs), and closes them in one order::

    with Offload(home="/srv/agent-home") as off:      # or Offload(config), or Offload()
        agent = off.build_agent("sess_1")               # its delegate_task runs on ``off``
        ...

Invariants:
- nothing here is process-global: two instances on two homes or ledgers share no records,
  slots, bus, loops or ledger, and each reads its configuration once, when built;
- policy numbers come from the config (``delegation.stall_*``) or the ``policy`` argument,
  never from module constants;
- ``close()`` stops, in order: the owner loop, the engine (no new units; the stall loop and
  the pool stop), then the ledger (its lease, listener and outbox). Units still running keep
  their daemon threads and finalize; a result that cannot be recorded any more is recovered
  by the next owner, as after a crash. ``close()`` is idempotent.

``Hooks`` is the one seam through which the hermes compat adapter (``compat/``, which offload
never imports) plugs in the names its acceptance suite patches; every hook is read when used.
"""
from __future__ import annotations

import os
import threading
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from offload.api import PublicApi
from offload.config import ConfigError, OffloadConfig, load_config, resolve_api_key, validate_config
from offload.engine.bus import CompletionBus
from offload.engine.delivery import Deliveries, is_this_process
from offload.engine.engine import Delegations
from offload.engine.events import is_interim
from offload.engine.health import LedgerHealth
from offload.engine.liveness import current_owner, owner_alive
from offload.engine.loop import Clock, Loop
from offload.engine.observers import add_observer
from offload.engine.policy import DEFAULTS, Policy
from offload.engine.pool import DaemonThreadPool
from offload.engine.recent_ids import RecentIds
from offload.home import get_hermes_home
from offload.ledger import DelegationLedger, open_ledger
from offload.ledger.config import with_env
from offload.ledger.select import open_configured_ledger
from offload.owner.loop import OwnerLoop
from offload.render.notification import format_event
from offload.subagents.admission import Admission
from offload.subagents.config import DelegationConfig
from offload.subagents import lineage
from offload.subagents.budget import SpendStore
from offload.subagents.tool import DelegateTool, Seams, resolve_delegation_credentials
from offload.subagents.child import build_child_agent, finalize_child_results, run_single_child
from offload.toolsets.child_tools import SETTING as CHILD_TOOLS
from offload.toolsets.toolset_names import DELEGATION_TOOLSET

Event = dict[str, Any]


@dataclass(frozen=True)
class Hooks:
    """Replacements for what an ``Offload`` would otherwise own or compute itself. Each is
    optional and called per use, so whoever plugs one in may change what it returns at any
    time. Records and events stay plain dicts across this boundary."""

    ledger: Callable[[], DelegationLedger] | None = None  # e.g. the ledger of $HERMES_HOME as it is now
    policy: Callable[[], Policy] | None = None
    owner_alive: Callable[[int | None, int | None], bool] | None = None
    new_id: Callable[[], str] | None = None
    executor: Callable[[int], Any] | None = None  # the pool for a number of workers
    persist_completion: Callable[[Event, dict[str, Any], "dict[str, Any] | None"], None] | None = None
    records: dict[str, dict[str, Any]] | None = None  # the engine's records, lock and slot counter
    records_lock: Any = None
    slots: Counter[str] | None = None
    bus: CompletionBus | None = None
    render: Callable[[Event], "str | None"] | None = None
    delegation_config: Callable[[], DelegationConfig | Mapping[str, Any]] | None = None
    resolve_credentials: Callable[[DelegationConfig, Any], dict[str, Any]] | None = None
    build_child: Callable[..., Any] | None = None
    run_child: Callable[..., dict[str, Any]] | None = None
    finalize_results: Callable[[list[dict[str, Any]], Any], list[dict[str, Any]]] | None = None


def policy_of(delegation: DelegationConfig, base: Policy = DEFAULTS) -> Policy:
    """``base`` with the stall monitor tuning of the ``delegation`` config section."""
    return replace(base, stall_idle_s=float(delegation.stall_idle_seconds),
                   stall_in_tool_s=float(delegation.stall_in_tool_seconds),
                   stall_grace_s=float(delegation.stall_grace_seconds),
                   stall_check_interval_s=float(delegation.stall_check_interval_seconds))


def with_settings(cfg: OffloadConfig, settings: Mapping[str, Any]) -> OffloadConfig:
    """``cfg`` with ``settings`` (config keys; a section given as a dict is merged into the
    section), validated as ``config.yaml`` is: a ConfigError names the bad key and the fix."""
    data = cfg.model_dump()
    for key, value in settings.items():
        data[key] = {**data[key], **value} if isinstance(data.get(key), dict) and isinstance(value, Mapping) else value
    return validate_config(data, "Offload(" + ", ".join(f"{k}=..." for k in settings) + ")",
                           fix="Pass a valid value, or leave the argument out to use config.yaml's.")


def workspace_of(cfg: OffloadConfig) -> Path:
    path = Path(cfg.workspace).expanduser() if cfg.workspace else Path.cwd()
    if not path.is_dir():
        raise ConfigError(f"workspace {path} is not a directory; create it or run "
                          "`offload config set workspace <dir>` (null = the current directory)")
    return path.resolve()


def tool_settings_of(cfg: OffloadConfig, home: Path | None = None) -> dict[str, Any]:
    """What an agent's tools read of ``cfg`` (``ToolContext.settings``) and its children's
    derivation: the depth limit, the role tool lists, the web allow-list, the terminal sandbox,
    offload's home."""
    delegation = cfg.delegation
    settings = {"max_spawn_depth": delegation.max_spawn_depth, "web_allowed_hosts": list(cfg.web.allowed_hosts),
                "terminal": cfg.terminal.model_dump(),
                CHILD_TOOLS: {"leaf": list(delegation.leaf_tools), "orchestrator": list(delegation.orchestrator_tools)}}
    return {**settings, "offload_home": str(home)} if home is not None else settings


PUBLISHED_IDS_KEPT = 10_000  # ids of units this instance published: more than its pending results


class _Engine(Delegations):
    """The engine, with the id, pool and terminal write routed through the hooks when set."""

    def __init__(self, hooks: Hooks, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hooks = hooks

    def new_id(self) -> str:
        return self._hooks.new_id() if self._hooks.new_id is not None else super().new_id()

    def pool_for(self, max_workers: int) -> DaemonThreadPool:
        hook = self._hooks.executor
        return hook(max_workers) if hook is not None else self.get_executor(max_workers)

    def persist(self, evt: Event, result: dict[str, Any], snapshot: dict[str, Any] | None) -> None:
        hook = self._hooks.persist_completion
        (hook if hook is not None else self.persist_completion)(evt, result, snapshot)


class Offload(PublicApi):
    """See the module docstring; the public methods (delegate, results, ack, list, stop) are
    ``offload.api``'s. ``config``: the validated configuration (default: the home's
    ``config.yaml``, read once now, with its environment overrides); ``home``: the data home
    (default ``$HERMES_HOME``, else ``~/.hermes``); ``ledger_url``: the ledger, over
    ``ledger.url`` and ``OFFLOAD_LEDGER_URL`` (default: ``<home>/state.db``); ``policy``: the
    engine's numbers (default: the defaults with the config's stall tuning); ``api_key``: the
    model endpoint's key (default: ``OFFLOAD_API_KEY`` or the variable ``api_key_env`` names);
    ``settings``: config keys over the config (``model=``, ``base_url=``,
    ``delegation={"independent_completions": True}``), validated like ``config.yaml``."""

    def __init__(self, config: OffloadConfig | None = None, *, home: str | os.PathLike[str] | None = None,
                 ledger_url: str | None = None, policy: Policy | None = None, clock: Clock | None = None,
                 hooks: Hooks | None = None, api_key: str | None = None, **settings: Any) -> None:
        self.home = Path(home).expanduser() if home is not None else get_hermes_home()
        config = config if config is not None else load_config(self.home / "config.yaml")
        self.config = with_settings(config, settings) if settings else config
        self.api_key = api_key
        self.hooks = hooks = hooks or Hooks()
        self.policy = policy or policy_of(self.config.delegation)
        self.health = LedgerHealth()
        self.clock = clock
        self._ledger = None if hooks.ledger is not None else self._open_ledger(ledger_url)
        self._published = RecentIds(PUBLISHED_IDS_KEPT)  # units whose final event this instance's engine published
        self.deliveries = Deliveries(ledger=self.ledger, owner_alive=self._owner_alive, policy=self.current_policy,
                                     health=self.health, is_me=self._is_me, on_our_bus=self._on_our_bus)
        self.bus = hooks.bus or CompletionBus(restore=self._restore, sweep=self._sweep, render=self.render)
        self.engine: Delegations = _Engine(hooks, ledger=self.ledger, publish=self._publish,
                                           policy=self.current_policy, health=self.health, records=hooks.records,
                                           lock=hooks.records_lock, slots=hooks.slots, clock=clock,
                                           on_dispatched=lambda: self.owner_loop.start(),
                                           on_finalized=lambda: self.admission.pump())
        self.owner_loop = OwnerLoop(engine=self.engine, ledger=self.ledger, clock=clock)
        self._unobserve = add_observer(self.owner_loop.journal.observe)  # removed at close
        self.delegate_tool = DelegateTool(self.engine, self.ledger, Seams(
            load_config=hooks.delegation_config or (lambda: self.config.delegation),
            resolve_credentials=hooks.resolve_credentials or resolve_delegation_credentials,
            build_child=hooks.build_child or build_child_agent, run_child=hooks.run_child or run_single_child,
            finalize_results=hooks.finalize_results or finalize_child_results), spend=SpendStore(self.ledger))
        self.admission = self.delegate_tool.admission = Admission(
            tool=self.delegate_tool, ledger=self.ledger, config=self.delegate_tool.seams.load_config,
            parent=lambda: self._queue_parent(), owner_alive=self._owner_alive,
            recover=lambda: self.deliveries.recover_abandoned(resuming=True))
        self.deliveries.resume = self._resume_task
        self._queue_parent_agent: Any = None
        self._close_lock = threading.Lock()
        self.closed = False

    def _open_ledger(self, url: str | None) -> DelegationLedger:
        """``url`` (any ``open_ledger`` URL; a PostgreSQL one with the ``ledger:`` lease settings),
        else ``ledger.url`` / ``OFFLOAD_LEDGER_URL``, else ``<home>/state.db``."""
        if url and not url.startswith(("postgresql://", "postgres://")):
            return open_ledger(url)  # a path, sqlite:///PATH or memory://NAME; a bad one raises LedgerError
        settings = with_env(self.config.ledger)
        if url:
            settings = settings.model_copy(update={"url": url})
        return open_configured_ledger(self.home / "state.db", settings, current_owner, self.clock)

    # -- what the parts are given ---------------------------------------------------------------
    def ledger(self) -> DelegationLedger:
        """The ledger this instance records in (the hook's, per call, when one is plugged in)."""
        return self.hooks.ledger() if self.hooks.ledger is not None else self._ledger  # type: ignore[return-value]

    def current_policy(self) -> Policy:
        return self.hooks.policy() if self.hooks.policy is not None else self.policy

    def _owner_alive(self, pid: int | None, started_at: int | None) -> bool:
        return (self.hooks.owner_alive or owner_alive)(pid, started_at)

    def _is_me(self, pid: int | None, started_at: int | None) -> bool:
        """Whether a row's owner is this process; also asks the liveness check, so a hook that
        declares this process's owner dead sees its rows replayed, as a later process would."""
        return self._owner_alive(pid, started_at) and is_this_process(pid, started_at)

    def _on_our_bus(self, delegation_id: str) -> bool:
        """Whether this instance's engine published that unit's event on the bus its consumers
        read. A bus plugged in by a hook (the compat adapter's) is the process's one bus, which
        every instance publishes on."""
        return self.hooks.bus is not None or delegation_id in self._published

    def _restore(self, target: Any) -> int:
        """A consumer's first look at the ledger: replay what waits for delivery, then start the
        queued units of owners that died (a restart finds them here)."""
        offered = self.deliveries.restore(target)
        self.admission.pump(foreign=True)
        return offered

    def _sweep(self, target: Any) -> int:
        offered = self.deliveries.maybe_sweep(target)
        self.admission.maybe_pump_foreign()
        return offered

    def _resume_task(self, row: Any) -> tuple[dict[str, Any] | None, str | None]:
        """What recovery does with a dead owner's unit (``offload.subagents.resume``): requeued
        to resume here if this process adopts its session's work, left for another long-lived
        process if not, settled ``unknown`` (with why) if it cannot be resumed."""
        from offload.subagents.resume import resume_task

        queued, why_not = resume_task(row, self.delegate_tool.delegation_config())
        if queued is not None and not self.admission.adopts(row):
            return {}, None
        return queued, why_not

    def _queue_parent(self) -> Any:
        """The agent whose credentials run a unit queued by a process that died (built once)."""
        if self._queue_parent_agent is None:
            self._queue_parent_agent = self.build_agent(f"admission-{os.getpid()}")
        return self._queue_parent_agent

    def _publish(self, evt: Event) -> None:
        if evt.get("delegation_id") and not is_interim(evt):
            self._published.add(str(evt["delegation_id"]))
        self.bus.completion_queue.put(evt)

    def render(self, evt: Event) -> str | None:
        """The parent-facing text of a completion-bus event (None for types nobody renders)."""
        if self.hooks.render is not None:
            return self.hooks.render(evt)
        return format_event(evt, lambda: self.config.delegation.model_dump())

    # -- agents -----------------------------------------------------------------------------------
    def set_approval_surface(self, *, no_ask_reason: str | None = None,
                             on_request: Callable[[dict[str, Any]], Any] | None = None) -> None:
        """Who answers this process's subagents' approval requests (``delegation.approvals: ask``):
        by default anyone on the ledger (``offload approvals``, the chat, the dashboard);
        ``no_ask_reason``: nobody can, so ``ask`` denies with this reason; ``on_request``: a surface
        told of each request as it is made (on the child's thread), e.g. MCP elicitation."""
        self.delegate_tool.no_ask_reason = no_ask_reason
        self.delegate_tool.on_approval_request = on_request

    def toolsets(self) -> dict[str, Callable[[], list[Any]]]:
        """The toolsets this runtime provides to the agents it builds (``delegation``)."""
        return {DELEGATION_TOOLSET: lambda: [self.delegate_tool.tool]}

    def build_agent(self, session_id: str, *, api_key: str | None = None, config: OffloadConfig | None = None) -> Any:
        """A parent agent for ``session_id`` whose ``delegate_task`` runs on this runtime.
        ``config`` replaces this instance's for the agent only (e.g. another endpoint)."""
        from offload.agent.core import AIAgent

        cfg = config or self.config
        key = api_key if api_key is not None else self.api_key
        agent = AIAgent(model=cfg.model, base_url=cfg.base_url,
                        api_key=key if key is not None else resolve_api_key(cfg),
                        toolsets=cfg.toolsets, max_iterations=cfg.max_iterations, workspace=workspace_of(cfg),
                        session_id=session_id, tool_settings=tool_settings_of(cfg, self.home),
                        stream_idle_timeout_s=cfg.stream_idle_timeout_s, provided_toolsets=self.toolsets())
        # Started by a subagent's command (`offload run` in run_command): its calls stay in that tree.
        inherited = lineage.from_env(os.environ, self.delegate_tool.spend, cfg.delegation.max_concurrent_children)
        if inherited is not None:
            lineage.adopt(agent, inherited)
        return agent

    def session_store(self) -> Any:
        """The session store of this home (``state.db``, where the ledger is a guest table)."""
        from offload.agent.session_store import SessionStore

        return SessionStore(self.home / "state.db")

    def loops(self) -> list[Loop]:
        """Every background loop of this runtime: the owner loop, the engine's (the stall loop)
        and its ledger's (PostgreSQL: lease heartbeat, outbox replayer, listener)."""
        ledger_loops = getattr(self._ledger, "loops", None)
        return [self.owner_loop.loop, *self.engine.loops(), *(ledger_loops() if ledger_loops else [])]

    # -- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the owner loop, the engine and the ledger, in that order (see the module docstring)."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        self._give_back_handed()
        self.owner_loop.stop()
        self.engine.close()
        self._unobserve()
        self.owner_loop.flush_journal()  # what units finalized by the engine's close said last
        if self._ledger is not None:  # a hooked ledger belongs to whoever plugged it in
            self._ledger.close()

    def __enter__(self) -> Offload:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Offload home={str(self.home)!r} ledger={getattr(self.ledger(), 'location', '?')!r} {state}>"
