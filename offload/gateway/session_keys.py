"""Gateway session keys -> chat routing: ``parse_session_key``, kept under its gateway name.

The parser itself lives with ``offload.origin.Origin``, which applies it once, when a
delegation's origin is captured; the gateway reads the chat off the carried ``Origin`` and
parses a key only for events written before the origin travelled whole.
"""
from __future__ import annotations

from offload.origin import THREADED_CHAT_TYPES, parse_session_key

__all__ = ["THREADED_CHAT_TYPES", "parse_session_key"]
