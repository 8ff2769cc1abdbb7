"""Test doubles for testing your own integration with offload, shipped with the package (as
httpx ships ``MockTransport``): public API.

- ``ScriptedModelServer``: a loopback OpenAI-compatible server whose every answer comes from a
  script (``script(request) -> Reply``), streaming or not; NOT a model.
- ``Reply`` and its builders ``text_reply`` (text, streamed in ``chunk_chars`` pieces),
  ``tool_call_reply``, ``error_reply``, ``hang_reply``; scripts ``rule_script``,
  ``sequence_script``; ``last_message_text`` for writing rules.
- ``demo_model_script`` and ``DEMO_MODEL``: the offline demo's script (what ``offload demo``
  serves; ``offload.testing.demo_script.demo_script``, exported under a name its module's
  does not shadow).
- ``MemoryLedger``: the in-process ledger (same contract as SQLite and PostgreSQL).
- ``FakeClock``: drives offload's background loops without threads or sleeps.

Names are imported on first use, so ``import offload.testing`` itself loads nothing else.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "FakeClock": "offload.testing.clock",
    "ScriptedModelServer": "offload.testing.model_server",
    "Reply": "offload.testing.replies",
    "text_reply": "offload.testing.replies",
    "tool_call_reply": "offload.testing.replies",
    "error_reply": "offload.testing.replies",
    "hang_reply": "offload.testing.replies",
    "rule_script": "offload.testing.replies",
    "sequence_script": "offload.testing.replies",
    "last_message_text": "offload.testing.replies",
    "demo_model_script": "offload.testing.demo_script",
    "DEMO_MODEL": "offload.testing.demo_script",
    "MemoryLedger": "offload.ledger.memory",
}
_SOURCE_NAMES = {"demo_model_script": "demo_script"}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), _SOURCE_NAMES.get(name, name))
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
