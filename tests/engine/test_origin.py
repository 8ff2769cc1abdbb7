"""``offload.origin.Origin``: its JSON wire form round-trips, and the flat fields a previous
version wrote (events, records and ledger rows from before ``origin`` travelled whole) are
read into the same origin."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from offload.origin import Origin, parse_session_key

_text = st.text(max_size=20)
origins = st.builds(Origin, session_key=_text, parent_session_id=st.none() | _text, ui_session_id=_text,
                    wake_session_id=_text, platform=_text, chat_type=_text, chat_id=_text, thread_id=_text,
                    scope_id=_text, user_id=_text, user_name=_text)

# A completion event as the main of 2026-12-04 (ec1952d) wrote it into event_json: flat fields only.
OLD_EVENT = json.loads("""{"type": "async_delegation", "delegation_id": "deleg_1a2b3c4d",
 "session_key": "agent:main:telegram:dm:4242:77", "origin_ui_session_id": "", "origin_session_id": "",
 "parent_session_id": "sess-parent-1", "goal": "count the files", "context": null, "toolsets": null,
 "role": null, "dispatched_at": 1764800000.5, "completed_at": 1764800012.25, "status": "completed",
 "user_id": "u-9", "user_name": "Ana", "model": "demo", "summary": "3 files", "error": null,
 "api_calls": 1, "duration_seconds": 11.75}""")


@given(origins)
def test_to_json_from_json_round_trips_through_json_text(origin: Origin) -> None:
    wire = json.loads(json.dumps(origin.to_json()))
    assert Origin.from_json(wire) == origin


@given(origins)
def test_flat_fields_keep_every_session_field(origin: Origin) -> None:
    back = Origin.from_flat(origin.flat())
    assert (back.session_key, back.ui_session_id, back.wake_session_id, back.user_id) == (
        origin.session_key, origin.ui_session_id, origin.wake_session_id, origin.user_id)
    assert back.parent_session_id == (origin.parent_session_id or None)


def test_an_event_of_the_previous_version_is_read_from_its_flat_fields() -> None:
    origin = Origin.of_event(OLD_EVENT)
    assert origin == Origin(session_key="agent:main:telegram:dm:4242:77", parent_session_id="sess-parent-1",
                            platform="telegram", chat_type="dm", chat_id="4242", thread_id="77",
                            user_id="u-9", user_name="Ana")
    assert origin.chat() == {"platform": "telegram", "chat_type": "dm", "chat_id": "4242", "thread_id": "77"}


def test_a_carried_origin_wins_over_flat_fields_and_a_malformed_one_falls_back() -> None:
    carried = Origin(session_key="k", platform="slack", chat_type="group", chat_id="C1")
    assert Origin.of_event({**OLD_EVENT, "origin": carried.to_json()}) == carried
    assert Origin.of_event({**OLD_EVENT, "origin": {"chat_id": 5}}) == Origin.of_event(OLD_EVENT)
    assert Origin.of_event({**OLD_EVENT, "origin": "garbage"}) == Origin.of_event(OLD_EVENT)
    assert Origin.of_event("not a mapping") == Origin()  # type: ignore[arg-type]


def test_unknown_keys_of_a_newer_writer_are_ignored() -> None:
    assert Origin.from_json({"session_key": "s", "tenant": "later"}) == Origin(session_key="s")


@pytest.mark.parametrize("bad", [None, [], "s", {"session_key": 3}, {"parent_session_id": ["x"]}])
def test_from_json_names_what_is_wrong(bad: object) -> None:
    with pytest.raises(ValueError, match="origin"):
        Origin.from_json(bad)


def test_capture_reads_the_chat_from_a_gateway_key_once() -> None:
    group = Origin.capture("agent:main:discord:group:G1:user7", "p")
    assert group.chat() == {"platform": "discord", "chat_type": "group", "chat_id": "G1"}  # no thread: a user id
    assert Origin.capture("", "p").chat() is None  # CLI: nothing to route to
    assert Origin.capture("sess-raw").chat() is None
    assert parse_session_key("agent:main:x:dm:") is None


def test_belongs_to_its_key_parent_and_wake_session_only() -> None:
    origin = Origin(session_key="k", parent_session_id="p", wake_session_id="w")
    assert all(origin.belongs_to(s) for s in ("k", "p", "w"))
    assert not origin.belongs_to("") and not origin.belongs_to("other")
