"""What a dispatch asks for (``UnitSpec``) and the in-memory record the engine keeps for it.
Pure: no clock but the record's own timestamps, no I/O.

A record is a dict because the hermes-compatible surface exposes it (``_records`` is patched
and read by the acceptance suite); its public keys are what ``/agents`` lists, and keys
starting with ``_`` are the engine's private bookkeeping. The spec's ``Origin`` goes into the
record whole as ``origin`` (its JSON) and as the flat session fields the hermes surface reads.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from offload.origin import Origin


@dataclass
class UnitSpec:
    goal: str  # the unit's label: its one goal, or a summary of its goals
    context: Any = None
    toolsets: list[str] | None = None
    role: Any = None
    model: Any = None
    origin: Origin = Origin()  # who the result belongs to, captured once at the tool call
    delegation_id: str | None = None  # None: the engine makes one
    is_batch: bool = False
    goals: list[Any] = field(default_factory=list)  # a batch unit: the whole call's goals
    slot_key: str | None = None  # units of one call share a slot; default: the unit's own id
    task_indexes: list[int] | None = None  # the subset of ``goals`` this unit runs
    task_transcripts: dict[Any, Any] | None = None
    group: str | None = None
    subagent_config: dict[str, Any] | None = None  # the model-rejection notice's subject, stamped at dispatch
    # A unit run by offload's own agent loop: what a new owner resumes it from (``subagents.resume``).
    durable: dict[str, Any] | None = None


def batch_spec(goals: list[Any] | None, task_indexes: list[int] | None = None, **fields: Any) -> UnitSpec:
    """A fan-out unit's spec: ``goals`` is the whole call's goal list, ``task_indexes`` the
    subset this unit runs (None: all of them); the label sums up the unit's own goals."""
    goals = list(goals or [])
    unit_goals = [goals[i] for i in task_indexes if 0 <= i < len(goals)] if task_indexes else goals
    return UnitSpec(batch_label(unit_goals), is_batch=True, goals=goals, task_indexes=task_indexes, **fields)


def batch_label(unit_goals: list[Any]) -> str:
    if len(unit_goals) == 1:
        return unit_goals[0]
    return f"{len(unit_goals)} parallel subagents: " + "; ".join(_short(g) for g in unit_goals)


def _short(goal: Any, limit: int = 40) -> str:
    """A goal on one line in at most ``limit`` characters, cut at a word with an ellipsis."""
    text = " ".join(str(goal).split())
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    if text[limit - 1] != " " and " " in cut:  # the cut fell inside a word: drop that word
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"


def new_record(spec: UnitSpec, delegation_id: str) -> dict[str, Any]:
    now = time.time()
    record: dict[str, Any] = {
        "delegation_id": delegation_id, "goal": spec.goal, "context": spec.context,
        "toolsets": list(spec.toolsets or []) or None, "role": spec.role, "model": spec.model,
        **spec.origin.flat(), "origin": spec.origin.to_json(),
        "status": "running", "dispatched_at": now, "completed_at": None, "is_batch": spec.is_batch,
        "slot_key": delegation_id, "interrupt_fn": None, "progress_fn": None, "transcript_fn": None,
        "_progress_token": None, "_progress_ts": time.monotonic(), "_interrupted_at": None, "_started": False,
    }
    if spec.subagent_config:
        record["subagent_config"] = dict(spec.subagent_config)
    if spec.durable:
        record["_durable"] = spec.durable  # private: written to the ledger task as ``durable``
    if spec.is_batch:
        record.update(goals=list(spec.goals), slot_key=spec.slot_key or delegation_id)
        for key in ("task_indexes", "task_transcripts", "group"):
            value = getattr(spec, key)
            if value:
                record[key] = list(value) if key == "task_indexes" else value
    return record


def invalid_dispatch(runner: Any, cap: Any) -> str | None:
    if not callable(runner):
        return f"runner must be a zero-argument callable, got {type(runner).__name__}; pass a function"
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        return f"max_async_children must be an integer of at least 1, got {cap!r}; raise it in the caller"
    return None


def capacity_error(is_batch: bool, cap: int, where: str = "") -> str:
    """``where``: how far the count reached, e.g. " on all hosts sharing the ledger"."""
    head = f"Async delegation capacity reached ({cap} running{where}). Wait for one to finish (its result will re-enter the chat)"
    if is_batch:
        return (f"{head}, run this task synchronously (background=false), or raise "
                "delegation.max_concurrent_children in config.yaml to allow more concurrent background units.")
    return (f"{head}, or run this task synchronously (background=false). Raise delegation.max_concurrent_children "
            "in config.yaml to allow more concurrent background subagents.")
