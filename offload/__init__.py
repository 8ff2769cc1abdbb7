"""offload: background subagents for a parent LLM agent, with a durable ledger.

``from offload import Offload`` is the composition root (``offload.runtime``); it and
``Hooks`` are imported on first use, so ``import offload`` (and ``offload --help``) stays cheap.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Hooks", "Offload", "__version__"]

if TYPE_CHECKING:
    from offload.runtime import Hooks, Offload


def __getattr__(name: str) -> Any:
    if name in ("Offload", "Hooks"):
        from offload import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'offload' has no attribute {name!r}")
