"""The scripted model server on real loopback sockets, driven by the official openai SDK."""
from __future__ import annotations

import json
import threading
import time
from typing import Callable

import httpx
import openai
import pytest

from offload.testing.model_server import (
    Reply,
    ScriptedModelServer,
    error_reply,
    hang_reply,
    sequence_script,
    text_reply,
    tool_call_reply,
)

pytestmark = pytest.mark.timeout(20)

MESSAGES = [{"role": "user", "content": "hi"}]


def client_for(server: ScriptedModelServer, api_key: str = "test-key") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=api_key, max_retries=0, timeout=10)


def test_streaming_text_in_openai_chunks(model_server) -> None:
    server = model_server(text_reply("Hello, offline world!", chunk_chars=4))
    stream = client_for(server).chat.completions.create(model="demo-model", messages=MESSAGES, stream=True)
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert pieces == ["Hell", "o, o", "ffli", "ne w", "orld", "!"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"
    assert {c.model for c in chunks} == {"demo-model"}
    assert len({c.id for c in chunks}) == 1
    assert server.requests[0]["messages"] == MESSAGES and server.requests[0]["stream"] is True


def test_streaming_tool_calls_are_assembled_by_the_sdk(model_server) -> None:
    server = model_server(
        Reply(
            text="Let me look.",
            tool_calls=[("read_file", {"path": "notes/todo.md"}), ("run_command", {"command": "ls -la", "timeout_s": 5})],
            chunk_chars=5,
        )
    )
    done_events = []
    with client_for(server).chat.completions.stream(model="demo-model", messages=MESSAGES) as stream:
        for event in stream:
            if event.type == "tool_calls.function.arguments.done":
                done_events.append((event.name, json.loads(event.arguments)))
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Let me look."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("read_file", {"path": "notes/todo.md"}),
        ("run_command", {"command": "ls -la", "timeout_s": 5}),
    ]
    assert done_events == [("read_file", {"path": "notes/todo.md"}), ("run_command", {"command": "ls -la", "timeout_s": 5})]
    assert len({c.id for c in message.tool_calls}) == 2
    assert final.choices[0].finish_reason == "tool_calls"


def test_non_streaming_text_and_tool_call(model_server) -> None:
    server = model_server(sequence_script([text_reply("plain answer"), tool_call_reply("fetch_url", {"url": "https://x.test"})]))
    client = client_for(server)
    first = client.chat.completions.create(model="demo-model", messages=MESSAGES)
    assert first.choices[0].message.content == "plain answer"
    assert first.choices[0].finish_reason == "stop" and first.model == "demo-model"
    assert first.usage is not None and first.usage.total_tokens > 0
    second = client.chat.completions.create(model="demo-model", messages=MESSAGES)  # reuses the keep-alive connection
    call = second.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("fetch_url", {"url": "https://x.test"})
    assert second.choices[0].message.content is None
    assert len(server.requests) == 2


def test_malformed_tool_arguments_are_sent_verbatim(model_server) -> None:
    server = model_server(tool_call_reply("write_file", '{"path": "a.txt", "content": '))
    completion = client_for(server).chat.completions.create(model="demo-model", messages=MESSAGES)
    assert completion.choices[0].message.tool_calls[0].function.arguments == '{"path": "a.txt", "content": '


def test_stream_usage_chunk_when_asked(model_server) -> None:
    server = model_server(text_reply("abcd" * 10))
    chunks = list(
        client_for(server).chat.completions.create(
            model="demo-model", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10


def test_unknown_model_is_404_model_not_found(model_server) -> None:
    server = model_server(text_reply("never"))
    with pytest.raises(openai.NotFoundError) as caught:
        client_for(server).chat.completions.create(model="gpt-imaginary", messages=MESSAGES)
    assert caught.value.status_code == 404
    assert caught.value.body == {
        "message": "The model 'gpt-imaginary' does not exist",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
    assert server.requests[0]["model"] == "gpt-imaginary"  # logged even though refused


def test_any_model_when_model_ids_is_none(model_server) -> None:
    server = model_server(lambda request: text_reply(f"you asked for {request['model']}"), model_ids=None)
    completion = client_for(server).chat.completions.create(model="whatever-1", messages=MESSAGES)
    assert completion.choices[0].message.content == "you asked for whatever-1"
    assert completion.model == "whatever-1"


def test_rate_limit_with_retry_after_header(model_server) -> None:
    server = model_server(error_reply(429, "Slow down (scripted).", retry_after_s=7))
    with pytest.raises(openai.RateLimitError) as caught:
        client_for(server).chat.completions.create(model="demo-model", messages=MESSAGES)
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body["message"] == "Slow down (scripted)."
    assert caught.value.body["type"] == "rate_limit_error"


def test_sdk_retries_honour_retry_after(model_server) -> None:
    server = model_server(sequence_script([error_reply(429, retry_after_s=0.05), text_reply("after retry")]))
    client = openai.OpenAI(base_url=server.url, api_key="k", max_retries=1, timeout=10)
    completion = client.chat.completions.create(model="demo-model", messages=MESSAGES)
    assert completion.choices[0].message.content == "after retry"
    assert len(server.requests) == 2


def test_error_code_override_and_script_failure(model_server) -> None:
    server = model_server(error_reply(400, "too long", error_code="context_length_exceeded"))
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(server).chat.completions.create(model="demo-model", messages=MESSAGES)
    assert caught.value.code == "context_length_exceeded"

    def broken(request: dict) -> Reply:
        raise KeyError("oops")

    broken_server = model_server(broken)
    with pytest.raises(openai.InternalServerError, match="the script failed: KeyError"):
        client_for(broken_server).chat.completions.create(model="demo-model", messages=MESSAGES)


def test_models_are_listed_and_labelled_as_scripted(model_server) -> None:
    server = model_server(text_reply("x"), model_ids=("demo-model", "demo-small"))
    client = client_for(server)
    models = list(client.models.list())
    assert [m.id for m in models] == ["demo-model", "demo-small"]
    assert {m.owned_by for m in models} == {"offload-demo (scripted, not a real model)"}
    assert client.models.retrieve("demo-small").id == "demo-small"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-imaginary")


def test_api_key_is_checked_when_set(model_server) -> None:
    server = model_server(text_reply("x"), api_key="right")
    with pytest.raises(openai.AuthenticationError):
        client_for(server, api_key="wrong").chat.completions.create(model="demo-model", messages=MESSAGES)
    ok = client_for(server, api_key="right").chat.completions.create(model="demo-model", messages=MESSAGES)
    assert ok.choices[0].message.content == "x"


def _stream_in_thread(server: ScriptedModelServer, first_chunk: threading.Event, outcome: dict) -> threading.Thread:
    def consume() -> None:
        try:
            stream = client_for(server).chat.completions.create(model="demo-model", messages=MESSAGES, stream=True)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    outcome.setdefault("text", "")
                    outcome["text"] += chunk.choices[0].delta.content
                    first_chunk.set()
            outcome["ended"] = "normally"
        except Exception as exc:  # the dropped connection surfaces as an SDK/transport error
            outcome["ended"] = type(exc).__name__

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    return thread


def test_hang_then_stop_returns_promptly(model_server) -> None:
    server = model_server(hang_reply("partial answer"))
    first_chunk, outcome = threading.Event(), {}
    consumer = _stream_in_thread(server, first_chunk, outcome)
    assert first_chunk.wait(5), "the hanging reply should still stream its partial text"
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2
    assert server.open_connections == 0  # the hanging handler itself finished, not just the socket
    consumer.join(5)
    assert not consumer.is_alive()
    assert outcome["text"] == "partial answer"
    assert outcome["ended"] == "APIConnectionError"  # the body was never completed


def test_non_streaming_hang_and_delay_are_cut_by_stop(model_server) -> None:
    for reply in (hang_reply(), text_reply("late", delay_s=60)):
        server = model_server(reply)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                client_for(server).chat.completions.create(model="demo-model", messages=MESSAGES)
            except Exception as exc:
                errors.append(exc)

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        assert server.wait_for_requests(1, timeout_s=5)
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2
        assert server.open_connections == 0
        caller.join(5)
        assert not caller.is_alive() and isinstance(errors[0], openai.APIConnectionError)


def test_a_hanging_request_does_not_block_others(model_server) -> None:
    server = model_server(lambda request: hang_reply() if request["messages"][0]["content"] == "hang" else text_reply("ok"))
    hanging = threading.Thread(
        target=lambda: _ignore(lambda: client_for(server).chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "hang"}])),
        daemon=True,
    )
    hanging.start()
    assert server.wait_for_requests(1, timeout_s=5)
    results = [client_for(server).chat.completions.create(model="demo-model", messages=MESSAGES) for _ in range(3)]
    assert [r.choices[0].message.content for r in results] == ["ok"] * 3
    server.stop()
    hanging.join(5)
    assert not hanging.is_alive()


def _ignore(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:
        pass


def test_raw_sse_wire_format(model_server) -> None:
    server = model_server(tool_call_reply("list_files", {"path": "."}, text="hi", chunk_chars=100))
    with httpx.Client() as http:
        response = http.post(
            f"{server.url}/chat/completions",
            json={"model": "demo-model", "messages": MESSAGES, "stream": True},
        )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = response.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-2])
    assert [p["choices"][0]["delta"] for p in payloads] == [
        {"role": "assistant", "content": "", "refusal": None},
        {"content": "hi"},
        {"tool_calls": [{"index": 0, "id": "call_scripted_2", "type": "function", "function": {"name": "list_files", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "."}'}}]},
        {},
    ]
    assert payloads[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert {p["object"] for p in payloads} == {"chat.completion.chunk"}


def test_bad_requests_get_openai_style_errors(model_server) -> None:
    server = model_server(text_reply("x"))
    with httpx.Client() as http:
        not_json = http.post(f"{server.url}/chat/completions", content=b"{nope", headers={"content-type": "application/json"})
        no_model = http.post(f"{server.url}/chat/completions", json={"messages": MESSAGES})
        wrong_path = http.get(f"{server.url}/embeddings")
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["error"]["message"]
    assert no_model.status_code == 400 and no_model.json()["error"]["type"] == "invalid_request_error"
    assert wrong_path.status_code == 404 and "/v1/chat/completions" in wrong_path.json()["error"]["message"]


def test_loopback_only_and_single_start() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        ScriptedModelServer(lambda r: text_reply("x"), host="0.0.0.0")
    with ScriptedModelServer(lambda r: text_reply("x")) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
        with pytest.raises(RuntimeError, match="starts once"):
            server.start()
    with pytest.raises(RuntimeError, match="starts once"):
        server.start()


def test_a_client_that_vanishes_mid_request_leaves_no_traceback(model_server, capsys) -> None:
    """A killed client resets its keep-alive connection; that is normal, not a server error."""
    import socket
    import struct

    server = model_server(text_reply("unused"))
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    deadline = time.monotonic() + 5
    while server.open_connections < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # with a zero linger: RST, as from a SIGKILLed process
    while server.open_connections > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.open_connections == 0
    assert "Traceback" not in capsys.readouterr().err
