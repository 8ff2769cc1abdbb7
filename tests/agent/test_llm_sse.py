"""The SSE reader under LLMClient: the line grammar with byte pieces split anywhere, ``[DONE]``,
keep-alive comments, error events mid-stream, malformed JSON and transport failures — over
httpx.MockTransport — and one whole call against the loopback model server on real sockets."""
from __future__ import annotations

import json
import random

import httpx
import pytest

from offload.agent.llm import LLMClient, LLMError, ModelNotFoundError
from offload.agent.llm_sse import iter_sse
from llm_fakes import BASE_URL, ScriptedServer, chunk, sse_body, tool_delta

STREAM = (
    b": keep-alive\r\n\r\n"
    b"event: message\r\ndata: {\"a\": \"caf\xc3\xa9\"}\r\n\r\n"
    b"data: first line\ndata: second line\n\n"
    b"id: 7\nretry: 100\ndata:no-space\n\n"
    b": another comment\n\n"
    b"data: tail without its blank line\n"
)
EXPECTED = [("message", b'{"a": "caf\xc3\xa9"}'), (None, b"first line\nsecond line"), (None, b"no-space")]


def _split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def test_every_single_split_point_gives_the_same_events():
    for cut in range(len(STREAM) + 1):
        assert list(iter_sse(_split_at(STREAM, [cut]))) == EXPECTED, f"split at byte {cut}"


def test_one_byte_pieces_and_random_splits_give_the_same_events():
    assert list(iter_sse([STREAM[i:i + 1] for i in range(len(STREAM))])) == EXPECTED
    rng = random.Random(11)
    for _ in range(200):
        cuts = rng.sample(range(len(STREAM)), rng.randint(1, 12))
        assert list(iter_sse(_split_at(STREAM, cuts))) == EXPECTED, f"cuts {sorted(cuts)}"


def make_client(server: ScriptedServer, **kwargs) -> LLMClient:
    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"unexpected backoff sleep of {seconds} s")
    options = dict(http_client=server.http_client(), sleep=no_sleep, poll_interval_s=0.01, rng=random.Random(0))
    options.update(kwargs)
    return LLMClient("test-model", BASE_URL, "", **options)


def pieces_response(body: bytes, size: int) -> httpx.Response:
    """A 200 SSE response whose body arrives in ``size``-byte pieces."""
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          content=iter([body[i:i + size] for i in range(0, len(body), size)]))


@pytest.mark.parametrize("size", [1, 3, 7, 64])
def test_a_stream_in_small_pieces_with_keep_alives_assembles_the_same_turn(size):
    body = (b": OPENROUTER PROCESSING\n\n"
            + sse_body(chunk("Hel"), chunk("lo \u2713"),
                       chunk(tool_calls=[tool_delta(0, call_id="c1", name="search", args='{"q":')]),
                       chunk(tool_calls=[tool_delta(0, args='"x"}')], finish="tool_calls"),
                       chunk(usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}, no_choices=True)))
    activity: list[int] = []
    turn = make_client(ScriptedServer(pieces_response(body, size))).stream_turn(
        [], [], on_activity=lambda: activity.append(1))
    assert turn.content == "Hello \u2713"
    assert turn.tool_calls == [{"id": "c1", "name": "search", "arguments_json": '{"q":"x"}'}]
    assert turn.finish_reason == "tool_calls"
    assert turn.usage == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert len(activity) == 6  # one activity signal per chunk and per keep-alive comment: both are life


def test_done_ends_the_stream_even_if_more_follows():
    body = sse_body(chunk("ok", finish="stop")) + b"data: {\"choices\": \"never read\"}\n\n"
    assert make_client(ScriptedServer(pieces_response(body, 5))).stream_turn([], []).content == "ok"


def test_a_named_error_event_mid_stream_fails_fast_unless_upstream_failed():
    body = sse_body(chunk("par"), done=False) + b'event: error\ndata: {"message": "context too long", "code": 400}\n\n'
    with pytest.raises(LLMError, match="reported an error mid-stream for model 'test-model': context too long") as info:
        make_client(ScriptedServer(pieces_response(body, 4))).stream_turn([], [])
    assert info.value.status_code == 400 and not info.value.retryable


def test_an_error_object_mid_stream_from_a_rate_limited_upstream_is_retried():
    body = sse_body(chunk("par"), done=False) + b'data: {"error": {"message": "slow down", "code": 429}}\n\n'
    server = ScriptedServer(pieces_response(body, 9), pieces_response(sse_body(chunk("full", finish="stop")), 9))
    sleeps: list[float] = []
    assert make_client(server, sleep=sleeps.append).stream_turn([], []).content == "full"
    assert len(server.requests) == 2 and sum(sleeps) > 0  # backed off once, in poll-sized slices


def test_malformed_json_split_across_pieces_is_a_clear_error_naming_the_fix():
    body = sse_body(chunk("a"), done=False) + b'data: {"choices": [{"delta": \n\n'
    with pytest.raises(LLMError, match=r"malformed JSON in the stream from http://llm.test/v1 .*check base_url"):
        make_client(ScriptedServer(pieces_response(body, 2))).stream_turn([], [])


def test_a_connection_dropped_mid_stream_is_retried_as_a_connection_failure():
    def broken() -> httpx.Response:
        def body():
            yield sse_body(chunk("par"), done=False)
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())
    server = ScriptedServer(lambda request: broken(), pieces_response(sse_body(chunk("full", finish="stop")), 64))
    sleeps: list[float] = []
    assert make_client(server, sleep=sleeps.append).stream_turn([], []).content == "full"
    assert len(server.requests) == 2 and sum(sleeps) > 0  # backed off once, in poll-sized slices


def test_an_error_status_with_a_plain_text_body_quotes_the_text():
    server = ScriptedServer(httpx.Response(422, text="upstream says: bad tools array"))
    with pytest.raises(LLMError, match="HTTP 422 .*bad tools array"):
        make_client(server).stream_turn([], [])


def test_request_body_is_plain_chat_completions_json_with_extra_body_merged():
    server = ScriptedServer(pieces_response(sse_body(chunk("ok", finish="stop")), 64))
    make_client(server, extra_body={"temperature": 0.1}).stream_turn(
        [{"role": "user", "content": "hi"}], [{"type": "function", "function": {"name": "f"}}])
    request = server.requests[0]
    assert request.url == f"{BASE_URL}/chat/completions" and request.method == "POST"
    assert request.headers["accept"] == "text/event-stream"
    assert json.loads(request.content) == {
        "model": "test-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "tools": [{"type": "function", "function": {"name": "f"}}], "stream_options": {"include_usage": True},
        "temperature": 0.1}


@pytest.mark.timeout(20)
def test_a_whole_call_against_the_loopback_model_server(model_server):
    from offload.testing.model_server import sequence_script, text_reply, tool_call_reply
    server = model_server(sequence_script([tool_call_reply("search", {"q": "x"}, text="Let me look"),
                                           text_reply("Found it: " + "é" * 40, chunk_chars=3)]))
    client = LLMClient("demo-model", server.url, "k")
    try:
        first = client.stream_turn([{"role": "user", "content": "hi"}], [])
        second = client.stream_turn([{"role": "user", "content": "hi"}], [])
        with pytest.raises(ModelNotFoundError, match="model 'no-such-model' does not exist"):
            LLMClient("no-such-model", server.url, "k", http_client=client._http_client).stream_turn([], [])
    finally:
        client.close()
    assert first.content == "Let me look" and first.finish_reason == "tool_calls"
    assert [(c["name"], json.loads(c["arguments_json"])) for c in first.tool_calls] == [("search", {"q": "x"})]
    assert second.content == "Found it: " + "é" * 40 and second.finish_reason == "stop"
    assert second.usage is not None and second.usage["completion_tokens"] > 0
