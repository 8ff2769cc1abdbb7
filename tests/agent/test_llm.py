"""LLMClient over httpx.MockTransport: streaming, tool-call assembly, retries, fail-fast errors,
malformed streams, idle timeout and interrupts. No network, no real sleeps (sleep and clock
are injected; the only waits are short queue polls)."""
from __future__ import annotations

import json
import random
import threading
from email.utils import format_datetime
from datetime import datetime, timezone

import httpx
import pytest

from offload.agent.llm import LLMClient, LLMError, ModelNotFoundError, RetryNotice
from offload.agent.llm_errors import retry_after_s
from llm_fakes import (
    BASE_URL, ScriptedServer, chunk, error_response, hanging_response, sse_response, tool_delta,
)


class FakeClock:
    """Monotonic clock that moves only when read: each read advances ``step_s``."""

    def __init__(self, step_s: float) -> None:
        self.now_s = 0.0
        self.step_s = step_s

    def __call__(self) -> float:
        self.now_s += self.step_s
        return self.now_s


@pytest.fixture
def release():
    event = threading.Event()
    yield event
    event.set()  # lets hanging fake streams finish so their reader threads exit


def make_client(server: ScriptedServer, *, sleeps: list[float] | None = None, **kwargs) -> LLMClient:
    defaults = dict(
        http_client=server.http_client(),
        sleep=(sleeps.append if sleeps is not None else _no_sleep),
        poll_interval_s=0.01,
        rng=random.Random(0),
    )
    defaults.update(kwargs)
    return LLMClient("test-model", BASE_URL, "", **defaults)


def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"unexpected backoff sleep of {seconds} s")


# --- streaming and assembly ---------------------------------------------------------------


def test_plain_answer_streams_content_and_reports_each_chunk():
    server = ScriptedServer(sse_response(
        chunk("Hel"), chunk("lo"), chunk(" world", finish="stop"),
        chunk(no_choices=True, usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}),
    ))
    activity: list[int] = []
    turn = make_client(server).stream_turn(
        [{"role": "user", "content": "hi"}], [], on_activity=lambda: activity.append(1))

    assert turn.content == "Hello world"
    assert turn.tool_calls == []
    assert turn.finish_reason == "stop"
    assert turn.usage == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    assert len(activity) == 4
    request = server.requests[0]
    assert str(request.url) == f"{BASE_URL}/chat/completions"
    assert request.headers["authorization"] == "Bearer not-needed"  # empty key → placeholder
    body = server.bodies()[0]
    assert body["stream"] is True and body["model"] == "test-model"
    assert "tools" not in body  # an empty tools array is rejected by OpenAI


def test_parallel_tool_calls_split_across_chunks_are_assembled_by_index():
    server = ScriptedServer(sse_response(
        chunk(tool_calls=[tool_delta(0, call_id="call_a", name="read_file", args="")]),
        chunk(tool_calls=[tool_delta(0, args='{"pa')]),
        chunk(tool_calls=[tool_delta(1, call_id="call_b", name="terminal", args='{"comm')]),
        chunk(tool_calls=[tool_delta(0, args='th": "a.txt"}')]),
        chunk(tool_calls=[tool_delta(1, args='and": "ls"}')]),
        chunk(finish="tool_calls"),
    ))
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    turn = make_client(server).stream_turn([{"role": "user", "content": "go"}], tools)

    assert turn.finish_reason == "tool_calls"
    assert turn.tool_calls == [
        {"id": "call_a", "name": "read_file", "arguments_json": '{"path": "a.txt"}'},
        {"id": "call_b", "name": "terminal", "arguments_json": '{"command": "ls"}'},
    ]
    assert server.bodies()[0]["tools"] == tools


def test_tool_calls_reusing_index_zero_with_new_ids_stay_separate():
    server = ScriptedServer(sse_response(
        chunk(tool_calls=[tool_delta(0, call_id="c1", name="a", args="{}")]),
        chunk(tool_calls=[tool_delta(0, call_id="c2", name="b", args="{}")]),
        chunk(finish="tool_calls"),
    ))
    turn = make_client(server).stream_turn([{"role": "user", "content": "go"}], [])
    assert [(c["id"], c["name"]) for c in turn.tool_calls] == [("c1", "a"), ("c2", "b")]


def test_a_failing_activity_callback_does_not_break_the_call():
    server = ScriptedServer(sse_response(chunk("ok", finish="stop")))

    def explode() -> None:
        raise RuntimeError("observer bug")

    assert make_client(server).stream_turn([], [], on_activity=explode).content == "ok"


# --- retries ------------------------------------------------------------------------------


def test_429_honors_retry_after_then_succeeds():
    server = ScriptedServer(
        error_response(429, "slow down", headers={"retry-after": "7"}),
        sse_response(chunk("done", finish="stop")),
    )
    sleeps: list[float] = []
    notices: list[RetryNotice] = []
    turn = make_client(server, sleeps=sleeps, poll_interval_s=1.0, on_retry=notices.append).stream_turn([], [])

    assert turn.content == "done"
    assert len(server.requests) == 2
    assert sum(sleeps) == pytest.approx(7.0)
    assert max(sleeps) <= 1.0  # sliced so should_stop is polled during the wait
    assert [(n.attempt, n.delay_s) for n in notices] == [(1, 7.0)]
    assert "HTTP 429" in notices[0].reason


def test_retry_after_is_capped():
    server = ScriptedServer(
        error_response(429, "slow down", headers={"retry-after": "3600"}),
        sse_response(chunk("done", finish="stop")),
    )
    sleeps: list[float] = []
    make_client(server, sleeps=sleeps, poll_interval_s=5.0, retry_after_cap_s=20.0).stream_turn([], [])
    assert sum(sleeps) == pytest.approx(20.0)


def test_500_then_success_backs_off_with_jitter():
    server = ScriptedServer(error_response(500, "boom"), sse_response(chunk("ok", finish="stop")))
    sleeps: list[float] = []
    turn = make_client(server, sleeps=sleeps, backoff_base_s=2.0, poll_interval_s=10.0).stream_turn([], [])
    assert turn.content == "ok"
    assert len(server.requests) == 2
    assert 1.0 <= sum(sleeps) <= 2.0  # base * 2**0 with jitter in [0.5, 1.0]


def test_persistent_5xx_gives_up_after_max_retries():
    server = ScriptedServer(*[error_response(503, "overloaded") for _ in range(3)])
    sleeps: list[float] = []
    with pytest.raises(LLMError) as info:
        make_client(server, sleeps=sleeps, max_retries=2).stream_turn([], [])
    assert len(server.requests) == 3
    assert "HTTP 503" in str(info.value) and "overloaded" in str(info.value)
    assert not isinstance(info.value, ModelNotFoundError)


def test_connection_error_is_retried():
    server = ScriptedServer(httpx.ConnectError("refused"), sse_response(chunk("ok", finish="stop")))
    sleeps: list[float] = []
    assert make_client(server, sleeps=sleeps).stream_turn([], []).content == "ok"
    assert len(server.requests) == 2 and sleeps


def test_backoff_wait_is_interruptible():
    server = ScriptedServer(error_response(429, "slow down", headers={"retry-after": "30"}))
    sleeps: list[float] = []
    turn = make_client(server, sleeps=sleeps, poll_interval_s=1.0).stream_turn(
        [], [], should_stop=lambda: len(sleeps) >= 2)
    assert turn.finish_reason == "interrupted"
    assert len(server.requests) == 1
    assert sum(sleeps) == pytest.approx(2.0)


def test_error_event_inside_the_stream_is_retried_when_upstream_failed():
    server = ScriptedServer(
        sse_response(chunk("par"), {"error": {"message": "upstream died", "code": 502}}),
        sse_response(chunk("full", finish="stop")),
    )
    sleeps: list[float] = []
    assert make_client(server, sleeps=sleeps).stream_turn([], []).content == "full"
    assert len(server.requests) == 2


def test_server_rejecting_stream_options_is_asked_again_without_them():
    server = ScriptedServer(
        error_response(400, "Unrecognized request argument supplied: stream_options"),
        sse_response(chunk("ok", finish="stop")),
    )
    assert make_client(server).stream_turn([], []).content == "ok"
    first, second = server.bodies()
    assert "stream_options" in first and "stream_options" not in second


# --- fail fast ----------------------------------------------------------------------------


def test_404_model_not_found_fails_fast_naming_the_model():
    server = ScriptedServer(error_response(404, "The model `foo/bar` does not exist", code="model_not_found"))
    client = LLMClient("foo/bar", BASE_URL, "sk-x", http_client=server.http_client(), sleep=_no_sleep)
    with pytest.raises(ModelNotFoundError) as info:
        client.stream_turn([], [])
    assert len(server.requests) == 1
    message = str(info.value)
    assert message.startswith(f"HTTP 404: model 'foo/bar' does not exist at {BASE_URL}: ")
    assert "The model `foo/bar` does not exist" in message
    assert info.value.model == "foo/bar"


def test_400_not_a_valid_model_fails_fast_as_model_not_found():
    server = ScriptedServer(error_response(400, "foo/bar is not a valid model ID"))
    client = LLMClient("foo/bar", BASE_URL, "sk-x", http_client=server.http_client(), sleep=_no_sleep)
    with pytest.raises(ModelNotFoundError) as info:
        client.stream_turn([], [])
    assert len(server.requests) == 1
    lowered = str(info.value).lower()
    assert "foo/bar" in lowered and "does not exist" in lowered


def test_other_400_fails_fast_without_claiming_the_model_is_missing():
    server = ScriptedServer(error_response(400, "messages[1].content must be a string"))
    with pytest.raises(LLMError) as info:
        make_client(server).stream_turn([], [])
    assert len(server.requests) == 1
    assert not isinstance(info.value, ModelNotFoundError)
    assert "HTTP 400" in str(info.value) and "must be a string" in str(info.value)


def test_401_says_who_must_fix_the_key():
    server = ScriptedServer(error_response(401, "Incorrect API key provided"))
    with pytest.raises(LLMError) as info:
        make_client(server).stream_turn([], [])
    assert len(server.requests) == 1
    assert str(info.value).startswith(f"HTTP 401 from {BASE_URL}: the API key was rejected; set OPENAI_API_KEY")
    assert "delegation.api_key" in str(info.value)


def test_malformed_json_in_stream_is_a_clear_error():
    bad = httpx.Response(200, headers={"content-type": "text/event-stream"},
                         content=b'data: {"choices": [\n\n')
    server = ScriptedServer(bad)
    with pytest.raises(LLMError, match="malformed JSON"):
        make_client(server).stream_turn([], [])
    assert len(server.requests) == 1


def test_a_body_that_is_not_sse_is_a_clear_error():
    server = ScriptedServer(httpx.Response(200, headers={"content-type": "text/html"}, content=b"<html>hi</html>"))
    with pytest.raises(LLMError, match="ended without a single completion chunk"):
        make_client(server).stream_turn([], [])


def test_chunk_of_the_wrong_shape_is_a_clear_error():
    server = ScriptedServer(sse_response({"choices": "oops"}))
    with pytest.raises(LLMError, match="malformed stream chunk"):
        make_client(server).stream_turn([], [])


# --- streams that never end ---------------------------------------------------------------


@pytest.mark.timeout(10)
def test_silent_stream_hits_the_idle_timeout(release):
    server = ScriptedServer(hanging_response([chunk("partial")], release))
    client = make_client(server, clock=FakeClock(step_s=30.0), stream_idle_timeout_s=120.0)
    with pytest.raises(LLMError, match="sent nothing for 120 s"):
        client.stream_turn([], [])
    assert len(server.requests) == 1  # a stuck server is not hammered again


@pytest.mark.timeout(10)
def test_interrupt_ends_a_never_ending_stream_with_what_was_received(release):
    server = ScriptedServer(hanging_response([chunk("Hel"), chunk("lo")], release))
    seen = threading.Event()
    chunks: list[int] = []

    def on_activity() -> None:
        chunks.append(1)
        if len(chunks) == 2:
            seen.set()

    turn = make_client(server).stream_turn([], [], on_activity=on_activity, should_stop=seen.is_set)
    assert turn.finish_reason == "interrupted"
    assert turn.content == "Hello"
    assert turn.tool_calls == []


@pytest.mark.timeout(10)
def test_interrupt_from_another_thread_while_waiting_for_data(release):
    server = ScriptedServer(hanging_response([chunk("x")], release))
    stop = threading.Event()
    first_chunk = threading.Event()
    trigger = threading.Thread(target=lambda: (first_chunk.wait(5), stop.set()))
    trigger.start()
    turn = make_client(server).stream_turn([], [], on_activity=first_chunk.set, should_stop=stop.is_set)
    trigger.join()
    assert turn.finish_reason == "interrupted" and turn.content == "x"


# --- retry-after parsing ------------------------------------------------------------------


def test_retry_after_forms():
    assert retry_after_s({"retry-after": "2.5"}, cap_s=60, now_s=0) == 2.5
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}, cap_s=60, now_s=0) == 1.5
    assert retry_after_s({"retry-after": "999"}, cap_s=60, now_s=0) == 60
    assert retry_after_s({"retry-after": "soon"}, cap_s=60, now_s=0) is None
    assert retry_after_s({}, cap_s=60, now_s=0) is None
    when = datetime(2030, 1, 1, 0, 0, 10, tzinfo=timezone.utc)
    now_s = datetime(2030, 1, 1, 0, 0, 0, tzinfo=timezone.utc).timestamp()
    assert retry_after_s({"retry-after": format_datetime(when, usegmt=True)}, cap_s=60, now_s=now_s) == 10


def test_request_carries_messages_and_key():
    server = ScriptedServer(sse_response(chunk("ok", finish="stop")))
    client = LLMClient("m", BASE_URL, "sk-real", http_client=server.http_client())
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    client.stream_turn(messages, None)
    assert server.requests[0].headers["authorization"] == "Bearer sk-real"
    assert json.loads(server.requests[0].content)["messages"] == messages
