"""Gateway session keys -> chat routing.

Owns ``parse_session_key``. A gateway session key looks like
``agent:main:<platform>:<chat_type>:<chat_id>[:<sixth>...]``; an empty key means the turn came
from the CLI or a desktop UI, which have no chat to route to.

Invariant: pure and total. For ANY input the result is either None or a dict whose values are
non-empty strings without ``:`` -- it never raises, because it runs inside the delivery loop
on keys read back from the durable ledger.
"""
from __future__ import annotations

# Only direct messages and threads carry a thread id in the sixth part. For group and channel
# keys the sixth part may be a per-user id, and routing a reply to it as a thread would send
# the result to the wrong place.
THREADED_CHAT_TYPES = frozenset({"dm", "thread"})


def parse_session_key(key: object) -> dict[str, str] | None:
    """``{"platform", "chat_type", "chat_id"[, "thread_id"]}`` or None if *key* is not routable."""
    if not isinstance(key, str) or not key:
        return None
    parts = key.split(":")
    if len(parts) < 5 or parts[0] != "agent" or parts[1] != "main":
        return None
    platform, chat_type, chat_id = parts[2], parts[3], parts[4]
    if not (platform and chat_type and chat_id):
        return None  # an empty field would route to no platform/chat at all
    route = {"platform": platform, "chat_type": chat_type, "chat_id": chat_id}
    if chat_type in THREADED_CHAT_TYPES and len(parts) > 5 and parts[5]:
        route["thread_id"] = parts[5]
    return route
