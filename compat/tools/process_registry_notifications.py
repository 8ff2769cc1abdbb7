"""hermes path ``tools.process_registry_notifications``: ``format_process_notification(event)``,
the renderer of the completion bus under its hermes name, over the pure
``offload.render.notification.format_event``.

It reads what the pure renderer must not: ``_delegation_config()``, the ``delegation``
section of ``$HERMES_HOME/config.yaml`` the SUBAGENT MODEL REJECTED notice names (for an event
that carries no dispatch-time stamp). Loaded only when a notice may be due, fails open to
``{}``, and looked up at call time, so tests may patch it here.
"""
from __future__ import annotations

from typing import Any

from offload.render.model_rejection import MODEL_NOT_FOUND_PATTERNS  # noqa: F401 - re-exported
from offload.render.notification import async_delegation_display_text, format_event  # noqa: F401 - re-exported

__all__ = ["format_process_notification", "async_delegation_display_text", "MODEL_NOT_FOUND_PATTERNS"]


def _delegation_config() -> dict[str, Any]:
    """The ``delegation`` config section of the current home, or ``{}`` if it cannot be read."""
    try:
        from offload.subagents.config import load_delegation_config

        return load_delegation_config().model_dump()
    except Exception:
        return {}


def format_process_notification(event: Any) -> str | None:
    """The parent-facing text for one completion-bus event, or None for unknown types."""
    return format_event(event, lambda: _delegation_config())
