"""hermes path ``gateway.run``: the gateway's delivery of background results
(``offload.gateway.runner``), rendering through ``tools.process_registry_notifications``
(looked up per call, so a patch of its ``_delegation_config`` applies)."""
from __future__ import annotations

from typing import Any

from offload.gateway.runner import BATCH_PREFIX, ROUTE_FIELDS, Adapter, DeliveryOutcome  # noqa: F401
from offload.gateway.runner import GatewayRunner as _GatewayRunner
from offload.gateway.runner import enrich_async_delegation_routing, gateway_text  # noqa: F401

Event = dict[str, Any]


def _render(evt: Event) -> str | None:
    from tools.process_registry_notifications import format_process_notification

    return format_process_notification(evt)


def _format_gateway_process_notification(evt: Event) -> str | None:
    """Text the gateway injects for *evt*, or None when another consumer owns the type."""
    return gateway_text(evt, _render)


class GatewayRunner(_GatewayRunner):
    render = staticmethod(_render)
