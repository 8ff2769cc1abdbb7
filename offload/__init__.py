"""offload: background subagents for a parent LLM agent, with a durable ledger.

``from offload import Offload`` is the composition root (``offload.runtime``) and the public
Python API (``offload.api``: ``delegate``, ``results``/``aresults``, ``ack``, ``list``, ``stop``,
returning ``Handle`` and ``Result``; bad input raises ``RequestError``, every explained failure
derives from ``OffloadError``). Test doubles are in ``offload.testing``. Names are imported on
first use, so ``import offload`` (and ``offload --help``) stays cheap.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
_HOMES = {"Offload": "offload.runtime", "Hooks": "offload.runtime", "Handle": "offload.api",
          "Result": "offload.api", "RequestError": "offload.errors", "OffloadError": "offload.errors"}
__all__ = sorted([*_HOMES, "__version__"])

if TYPE_CHECKING:
    from offload.api import Handle, Result
    from offload.errors import OffloadError, RequestError
    from offload.runtime import Hooks, Offload


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'offload' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
