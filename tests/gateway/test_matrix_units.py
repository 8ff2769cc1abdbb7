"""The Matrix gateway's pure parts: ids in session keys, message splitting, the access texts
and the config checks. (Its behaviour against a real homeserver: test_matrix_platform.py and
tests/e2e/test_gateway_matrix_e2e.py.)"""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st
from pydantic import ValidationError

from offload.gateway.access import Access
from offload.gateway.config import GatewayConfig
from offload.gateway.matrix.ids import decode, encode
from offload.gateway.matrix.text import content_size, render_parts
from offload.gateway.platform import Incoming, Route, session_key
from offload.origin import Origin


@given(st.text())
def test_an_escaped_id_has_no_colon_and_decodes_back(matrix_id):
    assert ":" not in encode(matrix_id) and decode(encode(matrix_id)) == matrix_id


def test_a_matrix_room_and_thread_survive_the_session_key_round_trip():
    route = Route(encode("!abc:example.org"), encode("$root:example.org"))
    key = session_key("matrix", Incoming(route, "thread", "hi"))
    chat = Origin.capture(key).chat()
    assert (decode(chat["chat_id"]), decode(chat["thread_id"])) == ("!abc:example.org", "$root:example.org")


def test_telegram_keys_stay_byte_for_byte():
    assert session_key("telegram", Incoming(Route("12345", "678"), "dm", "hi")) == "agent:main:telegram:dm:12345:678"


def test_every_part_fits_and_the_whole_body_is_carried_with_markup_escaped():
    body = "\n".join(f"line {n} <script>&amp;</script> " + "é" * 300 for n in range(200)) + "\n" + "z" * 50_000
    parts = render_parts(body, "Background result d1 (completed)", 5000)
    assert len(parts) > 10 and all(content_size(p) <= 5000 for p in parts)
    assert all(p["formatted_body"].startswith("<b>Background result d1") for p in parts)
    assert "<script>" not in "".join(p["formatted_body"] for p in parts)
    carried = "".join(p["body"].split("\n", 1)[1].replace("\n", "") for p in parts)
    assert carried == body.replace("\n", "")


def test_refusals_name_the_platforms_own_keys_and_only_the_strangers_id():
    matrix = Access("matrix", {encode("!served:x")}, "gateway.matrix.allowed_room_ids", {"@a:x"},
                    "gateway.matrix.allowed_user_ids", shown=decode)
    refusal = matrix.refusal(encode("!other:x"))
    assert "Its chat id is !other:x" in refusal and "'[\"!other:x\"]'" in refusal and "served" not in refusal
    assert "gateway.matrix.allowed_room_ids '[\"!served:x\", \"!other:x\"]'" in matrix.pairing(encode("!other:x"))
    assert "@b:x is not one of them" in matrix.user_refusal("@b:x") and "allowed_user_ids" in matrix.user_refusal("")
    assert not matrix.serves_user("@b:x") and matrix.serves_user("@a:x")
    telegram = Access("telegram", {"1"}, "gateway.telegram.allowed_chat_ids", numeric=True)
    assert "allowed_chat_ids '[999]'" in telegram.refusal("999") and telegram.serves_user("anyone")


@pytest.mark.parametrize("matrix, problem", [
    ({"homeserver": "matrix.org"}, "http"),
    ({"user_id": "offload"}, "Matrix user id"),
    ({"allowed_room_ids": ["#room:x"]}, "not a room id"),
    ({"allowed_user_ids": ["alice"]}, "not a Matrix user id"),
])
def test_bad_matrix_config_names_the_problem(matrix, problem):
    with pytest.raises(ValidationError, match=problem):
        GatewayConfig.model_validate({"matrix": matrix})
