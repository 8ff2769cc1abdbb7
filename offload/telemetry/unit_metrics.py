"""Counters of what the stall monitor does to units, pushed over OTLP by the process where it
happens (next to the GenAI metrics, ``export``): ``offload.stalls``, one per unit the monitor
found without progress past its threshold and interrupted, by ``offload.stall.phase`` (``idle``
| ``in_tool``) -- whether the child then honoured the interrupt (the unit finalizes
``interrupted``) or not (``stalled`` after the grace). Prometheus' ``offload_stalls_total``
counts the same units from the ledger, once each has finished.

Off until ``install`` is given a ``MeterProvider``; then an engine observer costs one branch per
notification and one counter update per stall.
"""
from __future__ import annotations

from typing import Any, Callable

from offload.engine.observers import add_observer

_remove: Callable[[], None] | None = None


def install(provider: Any) -> None:
    global _remove
    uninstall()
    stalls = provider.get_meter("offload").create_counter(
        "offload.stalls", unit="{unit}", description="Units the stall monitor interrupted for lack of progress")

    def observe(kind: str, _delegation_id: str, fields: dict[str, Any]) -> None:
        if kind == "stalled":
            stalls.add(1, {"offload.stall.phase": "in_tool" if fields.get("in_tool") else "idle"})

    _remove = add_observer(observe)


def uninstall() -> None:
    global _remove
    if _remove is not None:
        _remove()
    _remove = None
