"""hermes path ``tools.process_registry``: ``process_registry``, the default runtime's
completion bus (``process_registry.completion_queue``), and its class under both names.

Module-level, as hermes had it: the bus exists from import, before the default runtime is
built (on first use, by ``tools.async_delegation.runtime()``), which then publishes onto it.
Its replay, orphan sweep and renderer are the hermes names, looked up per call.
"""
from __future__ import annotations

import queue
from typing import Any

from offload.engine.bus import CompletionBus as _Bus

Event = dict[str, Any]


class CompletionBus(_Bus):
    """A bus whose replay and sweep go to the default runtime's deliveries and whose text is
    ``format_process_notification``; also what ``CompletionBus.__new__`` makes (hermes did)."""

    def _restore(self, target: queue.Queue) -> int:
        from tools.async_delegation_delivery import restore_undelivered_completions

        return restore_undelivered_completions(target)

    def _sweep(self, target: queue.Queue) -> int:
        from tools.async_delegation_delivery import maybe_sweep_orphaned_completions

        return maybe_sweep_orphaned_completions(target)

    def render(self, evt: Event) -> str | None:
        from tools.process_registry_notifications import format_process_notification

        return format_process_notification(evt)


# The hermes name: it once also tracked background processes; it is the completion bus.
ProcessRegistry = CompletionBus
process_registry = CompletionBus()
