"""hermes path ``tools.delegate_tool_dispatch``: how a delegate_task call runs (background
units on the default runtime's engine, or synchronously), over ``offload.subagents.dispatch``.
``_finalize_child_results`` (a unit's public result entries) is the seam the acceptance suite
patches; the default runtime looks it up here per unit."""
from __future__ import annotations

from typing import Any

from offload.origin import Origin
from offload.subagents.child import finalize_child_results as _finalize_child_results  # noqa: F401 - the seam
from offload.subagents.dispatch import capture_origin, run_sync, units_of  # noqa: F401 - re-exported
from offload.subagents.dispatch import dispatch_background as _dispatch_background


def dispatch_background(batch: Any, origin: Origin) -> dict[str, Any]:
    from tools.async_delegation import runtime

    return _dispatch_background(runtime().engine, batch, origin)
