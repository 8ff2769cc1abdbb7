"""The stall check, as a pure function: observations in, decisions out.

A child is stalled when its progress token has not changed for longer than the idle
threshold (or the higher in-tool threshold while it runs a tool); the first sample after the
start counts from the freshest of its children's last activity times when the token carries them. The clock starts when the
runner starts, never while the unit waits in the pool. A stalled unit is interrupted and
given a grace window; only when the window expires is it force-finalized. The engine's
monitor loop samples the records, calls :func:`sweep` with a chosen ``now`` and applies the
decisions; tests call :func:`sweep` directly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UNREADABLE = object()  # the sampler raised: keep the old token, never count as progress


@dataclass(frozen=True)
class Thresholds:
    idle_s: float
    in_tool_s: float
    grace_s: float


@dataclass(frozen=True)
class Observation:
    delegation_id: str
    status: str  # running | stalling
    started: bool
    token: Any  # freshly sampled progress token, or UNREADABLE
    in_tool: bool
    last_token: Any
    progress_at: float  # monotonic time the token last changed (or the runner started)
    interrupted_at: float | None = None
    activity_age_s: float | None = None  # how long ago its freshest child was last active, if the token says


def latest_activity_at(token: Any) -> float | None:
    """The freshest wall-clock activity time in a children's token (each entry ``(api_calls,
    tool, last_activity_ts, ...)``, the convention ``offload.engine.roster`` reads too), or None."""
    if not isinstance(token, (tuple, list)):
        return None
    stamps = [e[2] for e in token if isinstance(e, (tuple, list)) and len(e) > 2
              and isinstance(e[2], (int, float)) and not isinstance(e[2], bool)]
    return max(stamps) if stamps else None


@dataclass(frozen=True)
class Stall:
    delegation_id: str
    quiet_s: float
    threshold_s: float
    in_tool: bool


@dataclass
class Decisions:
    progressed: dict[str, tuple[Any, float]] = field(default_factory=dict)  # id -> (new token, progress at)
    stalled: list[Stall] = field(default_factory=list)  # interrupt these now
    expired: list[str] = field(default_factory=list)  # grace over: force-finalize
    monitorable: bool = False  # anything left for the monitor to watch


def sweep(observations: list[Observation], now: float, limits: Thresholds) -> Decisions:
    decisions = Decisions()
    for obs in observations:
        decisions.monitorable = True
        if obs.status == "stalling":
            if obs.interrupted_at is not None and now - obs.interrupted_at >= limits.grace_s:
                decisions.expired.append(obs.delegation_id)
            continue
        if not obs.started:
            continue  # queued behind the pool: no stall time accrues
        progress_at = obs.progress_at
        if obs.token is not UNREADABLE and obs.token != obs.last_token:
            # A changed token is progress now -- except the first sample after the start, which
            # is no news: it counts from the child's last activity when the token says when that
            # was (never before the start), so a child silent since it started (a hung endpoint)
            # is not given a fresh clock at the first sweep (the stall clock and the child's
            # idle time are one figure).
            first = obs.last_token is None and obs.activity_age_s is not None
            progress_at = min(now, max(progress_at, now - obs.activity_age_s)) if first else now
            decisions.progressed[obs.delegation_id] = (obs.token, progress_at)
        in_tool = obs.in_tool and obs.token is not UNREADABLE
        limit = limits.in_tool_s if in_tool else limits.idle_s
        quiet = now - progress_at
        if quiet >= limit:
            decisions.stalled.append(Stall(obs.delegation_id, round(quiet, 2), limit, in_tool))
    return decisions
