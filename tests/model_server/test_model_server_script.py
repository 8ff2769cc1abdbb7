"""Reply validation, the builders, and rule/sequence scripts (no sockets)."""
from __future__ import annotations

import pytest

from offload.testing.model_server import (
    DEFAULT_TEXT,
    Reply,
    error_reply,
    hang_reply,
    last_message_text,
    rule_script,
    sequence_script,
    text_reply,
    tool_call_reply,
)
from offload.testing.wire import chat_completion, stream_chunks


def request_with(*messages: dict) -> dict:
    return {"model": "demo-model", "messages": list(messages)}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"status": 302}, "status"),
        ({"status": 500, "hang": True}, "hang"),
        ({"chunk_chars": 0}, "chunk_chars"),
        ({"delay_s": -1}, "delay_s"),
        ({"chunk_delay_s": -0.1}, "chunk_delay_s"),
        ({"retry_after_s": -2}, "retry_after_s"),
        ({"tool_calls": [("", {})]}, "tool_calls"),
        ({"tool_calls": [("f", 3)]}, "arguments"),
    ],
)
def test_reply_is_validated_when_built(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Reply(**kwargs)


def test_builders() -> None:
    assert text_reply("hi", chunk_chars=2) == Reply(text="hi", chunk_chars=2)
    call = tool_call_reply("read_file", {"path": "a"}, text="reading")
    assert call.tool_calls == [("read_file", {"path": "a"})] and call.effective_finish_reason == "tool_calls"
    assert tool_call_reply("list_files").tool_calls == [("list_files", {})]
    limited = error_reply(429, "slow", retry_after_s=3)
    assert (limited.status, limited.error_message, limited.retry_after_s, limited.is_error) == (429, "slow", 3, True)
    assert hang_reply("part").hang and hang_reply("part").text == "part"
    assert text_reply("x").effective_finish_reason == "stop"
    assert Reply(text="x", finish_reason="length").effective_finish_reason == "length"


def test_last_message_text_takes_the_last_user_or_tool_message() -> None:
    assert last_message_text(request_with({"role": "system", "content": "sys"})) == ""
    assert last_message_text(
        request_with(
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "reply"},
            {"role": "tool", "tool_call_id": "c1", "content": "tool output"},
            {"role": "assistant", "content": None},
        )
    ) == "tool output"
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]}
    assert last_message_text(request_with(parts)) == "ab"
    assert last_message_text({"model": "m"}) == ""


def test_rule_script_first_match_wins_with_default() -> None:
    script = rule_script(
        [
            (lambda text: "weather" in text, text_reply("sunny")),
            (lambda text: "weather" in text or "rain" in text, text_reply("never reached for weather")),
            (lambda text: text.startswith("echo "), lambda request: text_reply(last_message_text(request)[5:])),
        ]
    )
    assert script(request_with({"role": "user", "content": "weather and rain?"})).text == "sunny"
    assert script(request_with({"role": "user", "content": "rain?"})).text == "never reached for weather"
    assert script(request_with({"role": "user", "content": "echo ping"})).text == "ping"
    assert script(request_with({"role": "user", "content": "other"})).text == DEFAULT_TEXT


def test_rule_script_custom_default_may_be_callable() -> None:
    script = rule_script([], default=lambda request: text_reply(f"{len(request['messages'])} messages"))
    assert script(request_with({"role": "user", "content": "x"}, {"role": "user", "content": "y"})).text == "2 messages"


def test_sequence_script_in_order_then_fails_loudly() -> None:
    script = sequence_script([text_reply("one"), text_reply("two")])
    assert [script({}).text, script({}).text] == ["one", "two"]
    exhausted = script({})
    assert exhausted.status == 500 and "exhausted" in (exhausted.error_message or "")
    forever = sequence_script([text_reply("one")], then=text_reply("again"))
    assert [forever({}).text for _ in range(3)] == ["one", "again", "again"]


def test_streamed_chunks_reassemble_the_non_streaming_message() -> None:
    reply = Reply(text="héllo wörld", tool_calls=[("f", {"a": [1, 2]}), ("g", "not json")], chunk_chars=3)
    request = request_with({"role": "user", "content": "x"})
    chunks = list(stream_chunks(request, reply, "id-1", 0, ["c1", "c2"]))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    arguments: dict[int, str] = {}
    for chunk in chunks:
        for call in chunk["choices"][0]["delta"].get("tool_calls", []):
            arguments[call["index"]] = arguments.get(call["index"], "") + call["function"]["arguments"]
    message = chat_completion(request, reply, "id-1", 0, ["c1", "c2"])["choices"][0]["message"]
    assert text == message["content"]
    assert [arguments[0], arguments[1]] == [c["function"]["arguments"] for c in message["tool_calls"]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_hanging_stream_never_sends_a_finish_chunk() -> None:
    chunks = list(stream_chunks(request_with(), hang_reply("abc", chunk_chars=1), "id", 0, []))
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4
