"""hermes path ``tools.async_delegation``: the background-delegation engine under its
hermes-era names, over the process's default ``offload.Offload`` (``runtime()``).

This module holds the process globals the acceptance suite reads and patches, and plugs them
into the runtime through ``offload.runtime.Hooks``, each read at call time:

- the policy constants (``_STALE_*``, ``_STALL_GRACE_SECONDS``, ``_MAX_RETAINED_COMPLETED``,
  the delivery numbers) through ``_policy()``;
- ``_records``, ``_records_lock`` and ``_active_slots``: the engine's own dict, lock and
  counter (the suite writes plain dicts into ``_records``);
- ``_new_delegation_id``, ``_get_executor`` and ``_persist_completion``, looked up here on
  every use, so a patch of any of them takes effect; ``_executor`` and ``_monitor_thread``
  read the engine's pool and stall thread;
- the ledger of ``$HERMES_HOME`` as it is at each call (``async_delegation_delivery``).

The default runtime is built once per process, on first use; ``_reset_for_tests`` forgets
its units but keeps it.
"""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from offload.engine.engine import new_delegation_id
from offload.engine.events import is_interim as is_interim_delegation_event  # noqa: F401 - re-exported
from offload.engine.policy import DEFAULTS, Policy
from offload.engine.pool import DaemonThreadPool
from offload.engine.states import ACTIVE_STATES as _ACTIVE_STATES  # noqa: F401 - re-exported
from offload.engine.states import LIVE_STATES as _LIVE_STATES  # noqa: F401 - re-exported
from offload.engine.units import UnitSpec, batch_spec
from offload.origin import IDENTITY_KEYS, Origin
from offload.home import state_db_path
from offload.ledger import DispatchRow, LedgerError  # noqa: F401 - re-exported
from offload.ledger.sqlite_files import initialize_schema as _initialize_schema  # noqa: F401 - re-exported
from offload.ledger.sqlite_files import open_connection
from offload.runtime import Hooks, Offload

from tools import async_delegation_delivery as _delivery
from tools.async_delegation_delivery import (  # noqa: F401 - re-exported
    claim_completion_delivery, claim_event_delivery, complete_completion_delivery, complete_event_delivery,
    defer_completion_delivery, drop_completion_delivery, get_durable_delegation, mark_completion_delivered,
    maybe_sweep_orphaned_completions, record_delivery_progress, recover_abandoned_delegations,
    release_completion_delivery, release_event_delivery, restore_undelivered_completions,
)

_DEFAULT_MAX_ASYNC_CHILDREN = 3
_MAX_RETAINED_COMPLETED = DEFAULTS.max_retained_completed
_STALE_CHECK_INTERVAL = DEFAULTS.stall_check_interval_s
_STALE_IDLE_SECONDS = DEFAULTS.stall_idle_s
_STALE_IN_TOOL_SECONDS = DEFAULTS.stall_in_tool_s
_STALL_GRACE_SECONDS = DEFAULTS.stall_grace_s
_MAX_DELIVERY_ATTEMPTS = DEFAULTS.max_delivery_attempts
_MAX_COMPLETION_REPLAY_AGE_S = DEFAULTS.max_replay_age_s
_CLAIM_LEASE_S = DEFAULTS.claim_lease_s
_DURABLE_RETENTION_SECONDS = DEFAULTS.settled_retention_s
_MAX_RETAINED_SETTLED = DEFAULTS.max_retained_settled
_DURABLE_PRUNE_INTERVAL_S = DEFAULTS.prune_interval_s
_ORPHAN_SWEEP_INTERVAL_S = DEFAULTS.orphan_sweep_interval_s
_CLAIM_CHECK_INTERVAL_S = DEFAULTS.claim_check_interval_s

_records: dict[str, dict[str, Any]] = {}
_records_lock = threading.Lock()
_active_slots: Counter[str] = Counter()  # slot_key -> number of running/stalling units

_POLICY_FIELDS = ("max_retained_completed", "stall_check_interval_s", "stall_idle_s", "stall_in_tool_s",
                  "stall_grace_s", "max_delivery_attempts", "max_replay_age_s", "claim_lease_s",
                  "settled_retention_s", "max_retained_settled", "prune_interval_s", "orphan_sweep_interval_s",
                  "claim_check_interval_s")
_policy_cache: tuple[tuple[Any, ...], Policy] | None = None
_runtime: Offload | None = None
_runtime_lock = threading.Lock()


def _policy() -> Policy:
    """The policy from this module's constants, as they are now (tests set them).

    Called several times per delegation: the ``Policy`` is rebuilt only when a constant changed."""
    global _policy_cache
    values = (_MAX_RETAINED_COMPLETED, _STALE_CHECK_INTERVAL, _STALE_IDLE_SECONDS, _STALE_IN_TOOL_SECONDS,
              _STALL_GRACE_SECONDS, _MAX_DELIVERY_ATTEMPTS, _MAX_COMPLETION_REPLAY_AGE_S, _CLAIM_LEASE_S,
              _DURABLE_RETENTION_SECONDS, _MAX_RETAINED_SETTLED, _DURABLE_PRUNE_INTERVAL_S, _ORPHAN_SWEEP_INTERVAL_S,
              _CLAIM_CHECK_INTERVAL_S)
    cached = _policy_cache
    if cached is not None and cached[0] == values:
        return cached[1]
    policy = Policy(**dict(zip(_POLICY_FIELDS, values)))
    _policy_cache = (values, policy)
    return policy


def runtime() -> Offload:
    """The process's default runtime, with this adapter's hooks (built once, on first use)."""
    global _runtime
    if _runtime is None:
        with _runtime_lock:
            if _runtime is None:
                _runtime = _build_runtime()
    return _runtime


def _build_runtime() -> Offload:
    import tools.delegate_tool as dt
    import tools.delegate_tool_dispatch as dtd
    import tools.process_registry as pr
    import tools.process_registry_notifications as prn
    from offload.config import OffloadConfig

    hooks = Hooks(
        ledger=lambda: _delivery.current_ledger(), policy=lambda: _policy(),
        owner_alive=lambda pid, started: _delivery.owner_alive(pid, started),
        new_id=lambda: _new_delegation_id(), executor=lambda n: _get_executor(n),
        persist_completion=lambda evt, result, snapshot: _persist_completion(evt, result, snapshot),
        records=_records, records_lock=_records_lock, slots=_active_slots, bus=pr.process_registry,
        render=lambda evt: prn.format_process_notification(evt), delegation_config=lambda: dt._load_config(),
        resolve_credentials=lambda cfg, parent: dt._resolve_delegation_credentials(cfg, parent),
        build_child=lambda **kw: dt._build_child_agent(**kw),
        run_child=lambda *args, **kw: dt._run_single_child(*args, **kw),
        finalize_results=lambda entries, unit: dtd._finalize_child_results(entries, unit))
    # The config is read per call through the hooks ($HERMES_HOME may change mid-process), so
    # the runtime's own is only the defaults; it never reads a home of its own.
    return Offload(OffloadConfig(), home=state_db_path().parent, hooks=hooks)


def __getattr__(name: str) -> Any:
    if name == "_executor":
        return runtime().engine.executor
    if name == "_monitor_thread":
        return runtime().engine.stalls.thread
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _new_delegation_id() -> str:
    return new_delegation_id()


def _connect():
    """A new connection to the current home's ``state.db`` (schema ready, files 0o600)."""
    return open_connection(state_db_path())


def _get_executor(max_workers: int) -> DaemonThreadPool:
    return runtime().engine.get_executor(max_workers)


def _persist_completion(evt: dict[str, Any], result: dict[str, Any], snapshot: dict[str, Any] | None = None) -> None:
    runtime().engine.persist_completion(evt, result, snapshot)


# -- dispatch --------------------------------------------------------------------------------
def dispatch_async_delegation(*, goal, context, toolsets, role, model, session_key, runner,
                              parent_session_id=None, origin_ui_session_id="", origin_session_id="",
                              interrupt_fn=None, max_async_children=_DEFAULT_MAX_ASYNC_CHILDREN,
                              progress_fn=None, origin: dict | None = None,
                              subagent_config: dict | None = None) -> dict[str, Any]:
    """Run ONE subagent in the background; returns ``{"status": "dispatched", "delegation_id"}``
    at once, or ``{"status": "rejected", "error"}``."""
    spec = UnitSpec(goal, context, toolsets, role, model,
                    _origin(session_key, parent_session_id, origin_ui_session_id, origin_session_id, origin),
                    subagent_config=subagent_config)
    return runtime().engine.dispatch(spec, runner, max_async_children, interrupt_fn=interrupt_fn,
                                     progress_fn=progress_fn)


def dispatch_async_delegation_batch(*, goals, context, toolsets, role, model, session_key, runner,
                                    parent_session_id=None, origin_ui_session_id="", origin_session_id="",
                                    interrupt_fn=None, max_async_children=_DEFAULT_MAX_ASYNC_CHILDREN,
                                    delegation_id=None, progress_fn=None, slot_key=None, task_indexes=None,
                                    task_transcripts=None, group=None, origin: dict | None = None,
                                    hold_slot: bool = False, subagent_config: dict | None = None) -> dict[str, Any]:
    """Run a fan-out unit (a whole call, or one group of it): ``goals`` is the whole call's goal
    list, ``task_indexes`` the subset this unit runs; ``hold_slot`` keeps the unit's slot taken
    until ``release_slot_hold``."""
    spec = batch_spec(goals, task_indexes, context=context, toolsets=toolsets, role=role, model=model,
                      origin=_origin(session_key, parent_session_id, origin_ui_session_id, origin_session_id, origin),
                      delegation_id=delegation_id, slot_key=slot_key, task_transcripts=task_transcripts, group=group,
                      subagent_config=subagent_config)
    return runtime().engine.dispatch(spec, runner, max_async_children, interrupt_fn=interrupt_fn,
                                     progress_fn=progress_fn, hold_slot=hold_slot)


def _origin(session_key: Any, parent_session_id: Any, ui_session_id: Any, wake_session_id: Any,
            identity: dict | None) -> Origin:
    """The hermes arguments (the session fields, ``origin`` = scope/user identity) as one Origin."""
    return Origin.from_flat({"session_key": session_key, "parent_session_id": parent_session_id,
                             "origin_ui_session_id": ui_session_id, "origin_session_id": wake_session_id,
                             **{k: v for k, v in (identity or {}).items() if k in IDENTITY_KEYS}})


def release_slot_hold(slot_key: str) -> None:
    runtime().engine.release_slot_hold(slot_key)


def _finalize(delegation_id: str, result, status: str) -> bool:
    return runtime().engine.finalize(delegation_id, result, status)


def record_unit_child(delegation_id: str, entry: dict[str, Any]) -> bool:
    return runtime().engine.record_unit_child(delegation_id, entry)


def _prune_completed_locked() -> None:
    runtime().engine.prune_completed_locked()


# -- queries, interrupts and the stall check -----------------------------------------------------
def active_count() -> int:
    return runtime().engine.active_count()


def active_task_count() -> int:
    return runtime().engine.active_task_count()


def has_live_for_session(session_key: str = "", origin_ui_session_id: str = "", parent_session_id: str = "") -> bool:
    return runtime().engine.has_live_for_session(session_key, origin_ui_session_id, parent_session_id)


def list_async_delegations() -> list[dict[str, Any]]:
    return runtime().engine.list()


def interrupt_all(reason: str = "shutdown") -> int:
    return runtime().engine.interrupt(lambda r: True, reason)


def interrupt_delegation(delegation_id: str, reason: str = "user") -> int:
    """Ask one running/stalling unit of this process to stop; 1 if signalled, else 0."""
    return runtime().engine.interrupt_one(delegation_id, reason)


def interrupt_for_session(session_key: str = "", origin_ui_session_id: str = "", parent_session_id: str = "",
                          reason: str = "session_end") -> int:
    return runtime().engine.interrupt_session(session_key, origin_ui_session_id, parent_session_id, reason)


def _check_stalls(now: float) -> bool:
    return runtime().engine.stalls.check(now)


def _reset_for_tests() -> None:
    runtime().engine.reset()
    runtime().admission.reset()
    _delivery.reset_for_tests()
