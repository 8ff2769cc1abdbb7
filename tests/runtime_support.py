"""Helpers for tests on their own ``offload.Offload`` (the ``runtime`` fixture): dispatch a unit
(one goal, or a fan-out) the way ``delegate_task`` makes one, and wait for its completion event
on that runtime's bus."""
from __future__ import annotations

from typing import Any, Callable

from offload.engine.units import UnitSpec, batch_spec
from offload.origin import Origin
from offload.runtime import Offload
from tests.engine.conftest import wait_event


def dispatch(off: Offload, runner: Callable[[], Any], goal: str = "g", cap: int = 3, *, interrupt_fn=None,
             progress_fn=None, **spec: Any) -> dict[str, Any]:
    """One single-goal unit on ``off``'s engine; ``spec``: ``UnitSpec`` fields, and the session fields
    of its origin (session_key, parent_session_id)."""
    return off.engine.dispatch(UnitSpec(goal, role=spec.pop("role", "leaf"), model=spec.pop("model", "m"),
                                        **_with_origin(spec)),
                               runner, cap, interrupt_fn=interrupt_fn, progress_fn=progress_fn)


def _with_origin(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its loose session fields (session_key, parent_session_id, ui_session_id, and
    ``origin`` as the hermes identity dict) made into the unit's one ``Origin``, unless ``origin``
    already is one."""
    if isinstance(spec.get("origin"), Origin):
        return spec
    identity = {k: v for k, v in (spec.pop("origin", None) or {}).items() if k in ("scope_id", "user_id", "user_name")}
    origin = Origin.capture(spec.pop("session_key", ""), spec.pop("parent_session_id", None),
                            ui_session_id=spec.pop("ui_session_id", ""), **identity)
    return {"origin": origin, **spec}


def finished(off: Offload, session_id: str, summary: str = "ok") -> dict[str, Any]:
    """Dispatch a unit for ``session_id`` and wait until its event is on the bus (left there)."""
    handle = dispatch(off, lambda: {"status": "completed", "summary": summary}, session_key=session_id,
                      parent_session_id=session_id)
    evt = wait_event(handle["delegation_id"], bus=off.bus)
    off.bus.completion_queue.put(evt)
    return evt


def batch(off: Offload, runner: Callable[[], Any], goals: list[str] | tuple[str, ...] = ("a", "b"), cap: int = 3, *,
          task_indexes: list[int] | None = None, interrupt_fn=None, progress_fn=None, hold_slot: bool = False,
          **spec: Any) -> dict[str, Any]:
    """One fan-out unit (``goals``, of which it runs ``task_indexes``) on ``off``'s engine."""
    unit = batch_spec(list(goals), task_indexes, role=spec.pop("role", "leaf"), model=spec.pop("model", "m"),
                      **_with_origin(spec))
    return off.engine.dispatch(unit, runner, cap, interrupt_fn=interrupt_fn, progress_fn=progress_fn,
                               hold_slot=hold_slot)


def wait(off: Offload, delegation_id: str, **kw: Any) -> dict[str, Any]:
    """``wait_event`` on ``off``'s bus."""
    return wait_event(delegation_id, bus=off.bus, **kw)


def hermes_dispatch(off: Offload, *, runner: Callable[[], Any], max_async_children: int = 3, interrupt_fn=None,
                    progress_fn=None, **spec: Any) -> dict[str, Any]:
    """``dispatch_async_delegation``'s keywords, on ``off``'s engine (for tests written that way)."""
    return off.engine.dispatch(UnitSpec(**_with_origin(spec)), runner, max_async_children, interrupt_fn=interrupt_fn,
                               progress_fn=progress_fn)


def hermes_batch(off: Offload, *, runner: Callable[[], Any], goals: list[Any], task_indexes: list[int] | None = None,
                 max_async_children: int = 3, interrupt_fn=None, progress_fn=None, hold_slot: bool = False,
                 **spec: Any) -> dict[str, Any]:
    """``dispatch_async_delegation_batch``'s keywords, on ``off``'s engine."""
    return off.engine.dispatch(batch_spec(goals, task_indexes, **_with_origin(spec)), runner, max_async_children,
                               interrupt_fn=interrupt_fn, progress_fn=progress_fn, hold_slot=hold_slot)
