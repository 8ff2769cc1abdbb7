"""Helpers for tests on their own ``offload.Offload`` (the ``runtime`` fixture): dispatch a unit
the way ``delegate_task`` makes one, and wait for its completion event on that runtime's bus."""
from __future__ import annotations

from typing import Any, Callable

from offload.engine.units import UnitSpec
from offload.runtime import Offload
from tests.engine.conftest import wait_event


def dispatch(off: Offload, runner: Callable[[], Any], goal: str = "g", cap: int = 3, *, interrupt_fn=None,
             progress_fn=None, **spec: Any) -> dict[str, Any]:
    """One single-goal unit on ``off``'s engine; ``spec``: ``UnitSpec`` fields (session_key, ...)."""
    return off.engine.dispatch(UnitSpec(goal, role=spec.pop("role", "leaf"), model=spec.pop("model", "m"), **spec),
                               runner, cap, interrupt_fn=interrupt_fn, progress_fn=progress_fn)


def finished(off: Offload, session_id: str, summary: str = "ok") -> dict[str, Any]:
    """Dispatch a unit for ``session_id`` and wait until its event is on the bus (left there)."""
    handle = dispatch(off, lambda: {"status": "completed", "summary": summary}, session_key=session_id,
                      parent_session_id=session_id)
    evt = wait_event(handle["delegation_id"], bus=off.bus)
    off.bus.completion_queue.put(evt)
    return evt
