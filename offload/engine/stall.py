"""The stall loop of a ``Delegations``: a ``Loop`` (thread ``async-delegate-stale-monitor``)
that calls :meth:`StallLoop.check` every ``policy().stall_check_interval_s``, or more often when a
stall threshold is short (``check_interval_s``).

``check(now)`` samples the watched records under the lock, decides with the pure
``monitor.sweep`` and acts outside the lock: a stalled unit is interrupted, and one whose
grace window expired is force-finalized ``stalled``. The loop exits when nothing is left
to watch (re-checked under the loop's start lock, which a monitored dispatch takes after its
record is in place), and the next monitored dispatch starts it again. Tests call ``check``
with a chosen monotonic ``now``, or drive the loop with a fake clock.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from offload.engine.events import stalled_result
from offload.engine.log import logger
from offload.engine.loop import Clock, Loop
from offload.engine.observers import notify
from offload.engine.states import STOP_STALL
from offload.engine.monitor import UNREADABLE, Decisions, Observation, Thresholds, latest_activity_at, sweep

if TYPE_CHECKING:
    from offload.engine.monitor import Stall


MIN_CHECK_INTERVAL_S = 0.05
THRESHOLD_SHARE = 0.25  # a stall is seen at most this share of its threshold late


def check_interval_s(policy: Any) -> float:
    """``stall_check_interval_s``, shortened to a quarter of the shorter stall threshold (idle, in
    a tool), so a 2 s threshold is acted on within 2.5 s, not one 30 s interval later."""
    shortest_s = min(policy.stall_idle_s, policy.stall_in_tool_s)
    return max(MIN_CHECK_INTERVAL_S, min(policy.stall_check_interval_s, shortest_s * THRESHOLD_SHARE))


def _watched(record: dict[str, Any]) -> bool:
    return record.get("status") == "stalling" or (record.get("status") == "running" and bool(record.get("progress_fn")))


class Engine(Protocol):
    """What the stall loop reads and calls on the engine it hangs off (``engine.Delegations``),
    named here so the loop does not know the module that owns it and builds it."""

    lock: Any  # guards ``records``
    records: dict[str, Any]

    def policy(self) -> Any: ...

    def finalize(self, delegation_id: str, result: Any, status: str) -> bool: ...


class StallLoop:
    def __init__(self, engine: Engine, clock: Clock | None = None) -> None:
        self.engine = engine
        self.loop = Loop("async-delegate-stale-monitor", self.check, lambda: check_interval_s(engine.policy()),
                         clock=clock, still_idle=lambda: not self._has_watched(), what="stall check")

    @property
    def thread(self) -> threading.Thread | None:
        return self.loop.thread

    def ensure_running(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop(timeout_s=2)

    def _has_watched(self) -> bool:
        with self.engine.lock:
            return any(_watched(r) for r in self.engine.records.values())

    def check(self, now: float) -> bool:
        """One sweep at monotonic time ``now``. Returns whether anything is left to watch."""
        with self.engine.lock:
            watched = [(r["delegation_id"], r["status"], r.get("_started"), r.get("progress_fn"),
                        r.get("_progress_token"), r.get("_progress_ts", now), r.get("_interrupted_at"))
                       for r in self.engine.records.values() if _watched(r)]
        wall = time.time()
        observations = []
        for did, status, started, fn, last, ts, at in watched:
            token, in_tool = _sample(fn, status, started, last)
            active_at = latest_activity_at(token) if token is not UNREADABLE else None
            observations.append(Observation(did, status, bool(started), token, in_tool, last, ts, at,
                                            None if active_at is None else max(0.0, wall - active_at)))
        policy = self.engine.policy()
        limits = Thresholds(policy.stall_idle_s, policy.stall_in_tool_s, policy.stall_grace_s)
        decisions = sweep(observations, now, limits)
        stalls = {stall.delegation_id: stall for stall in decisions.stalled}
        for delegation_id, interrupt_fn in self._apply(decisions, now):
            _signal_stalled(stalls[delegation_id], interrupt_fn)
        for delegation_id in decisions.expired:
            self._force_stalled(delegation_id, limits.grace_s)
        return decisions.monitorable

    def _apply(self, decisions: Decisions, now: float) -> list[tuple[str, Any]]:
        interrupts = []
        with self.engine.lock:
            for delegation_id, (token, progress_at) in decisions.progressed.items():
                record = self.engine.records.get(delegation_id)
                if record is not None and record["status"] == "running":
                    record["_progress_token"], record["_progress_ts"] = token, progress_at
            for stall in decisions.stalled:
                record = self.engine.records.get(stall.delegation_id)
                if record is None or record["status"] != "running":
                    continue  # finished while we sampled
                record.update(status="stalling", _interrupted_at=now, _stop_reason=STOP_STALL,
                              _stall_quiet_seconds=stall.quiet_s,
                              _stall_threshold_seconds=stall.threshold_s, _stall_in_tool=stall.in_tool)
                interrupts.append((stall.delegation_id, record.get("interrupt_fn")))
        return interrupts

    def _force_stalled(self, delegation_id: str, grace_s: float) -> None:
        with self.engine.lock:
            record = self.engine.records.get(delegation_id)
            context = record.get("_context") if record else None

        def finalize() -> None:
            self.engine.finalize(delegation_id, lambda snap: stalled_result(snap, grace_s=grace_s, now=time.time()),
                                 "stalled")

        context.copy().run(finalize) if context is not None else finalize()


def _sample(progress_fn, status: str, started: bool, last: Any) -> tuple[Any, bool]:
    if status != "running" or not started or progress_fn is None:
        return last, False
    try:
        token, in_tool = progress_fn()
        return token, bool(in_tool)
    except Exception:
        return UNREADABLE, False  # an unreadable child must never look permanently healthy


def _signal_stalled(stall: Stall, interrupt_fn) -> None:
    logger.warning("Async delegation %s made no progress past its threshold; interrupting it", stall.delegation_id)
    notify("stalled", stall.delegation_id, quiet_s=stall.quiet_s, threshold_s=stall.threshold_s, in_tool=stall.in_tool)
    if interrupt_fn is None:
        return
    try:
        interrupt_fn()
    except Exception:
        logger.debug("interrupt_fn of stalled %s raised", stall.delegation_id, exc_info=True)
