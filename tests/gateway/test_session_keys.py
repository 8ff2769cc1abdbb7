"""parse_session_key: the routing table and its never-raises property."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offload.gateway.session_keys import parse_session_key


@pytest.mark.parametrize("key, expected", [
    ("agent:main:telegram:dm:12345:678",
     {"platform": "telegram", "chat_type": "dm", "chat_id": "12345", "thread_id": "678"}),
    ("agent:main:telegram:dm:12345", {"platform": "telegram", "chat_type": "dm", "chat_id": "12345"}),
    ("agent:main:slack:thread:C1:1712.55",
     {"platform": "slack", "chat_type": "thread", "chat_id": "C1", "thread_id": "1712.55"}),
    # Group/channel: the sixth part may be a per-user id and is NOT a thread.
    ("agent:main:telegram:group:-100:4", {"platform": "telegram", "chat_type": "group", "chat_id": "-100"}),
    ("agent:main:discord:channel:9:u7:extra", {"platform": "discord", "chat_type": "channel", "chat_id": "9"}),
    ("agent:main:telegram:dm:12345:", {"platform": "telegram", "chat_type": "dm", "chat_id": "12345"}),
    ("agent:main:cli:dm:local", {"platform": "cli", "chat_type": "dm", "chat_id": "local"}),
    ("", None),
    ("agent:main:telegram:dm", None),
    ("agent:other:telegram:dm:1", None),
    ("bot:main:telegram:dm:1", None),
    ("agent:main::dm:1", None),
    ("agent:main:telegram::1", None),
    ("agent:main:telegram:dm:", None),
    ("20260703_parent_sid", None),
    (None, None),
    (42, None),
    (b"agent:main:telegram:dm:1", None),
    (["agent", "main", "telegram", "dm", "1"], None),
])
def test_parse_table(key, expected):
    assert parse_session_key(key) == expected


_any_input = st.one_of(
    st.text(), st.text(alphabet=":agentmaidhrl0123", max_size=40), st.none(), st.integers(),
    st.binary(), st.floats(), st.lists(st.text(max_size=5), max_size=6),
    st.lists(st.text(max_size=6), min_size=2, max_size=8).map(lambda parts: "agent:main:" + ":".join(parts)),
)


@given(_any_input)
def test_never_raises_and_returns_clean_routes(key):
    route = parse_session_key(key)
    if route is not None:
        assert set(route) <= {"platform", "chat_type", "chat_id", "thread_id"}
        assert {"platform", "chat_type", "chat_id"} <= set(route)
        assert all(isinstance(v, str) and v and ":" not in v for v in route.values())
        assert ("thread_id" not in route) or route["chat_type"] in {"dm", "thread"}


_field = st.text(min_size=1, max_size=12).filter(lambda s: ":" not in s)


@given(platform=_field, chat_type=_field, chat_id=_field, sixth=st.one_of(st.none(), _field))
def test_well_formed_keys_round_trip(platform, chat_type, chat_id, sixth):
    key = f"agent:main:{platform}:{chat_type}:{chat_id}" + (f":{sixth}" if sixth else "")
    route = parse_session_key(key)
    assert route is not None
    assert (route["platform"], route["chat_type"], route["chat_id"]) == (platform, chat_type, chat_id)
    assert route.get("thread_id") == (sixth if chat_type in {"dm", "thread"} else None)
