"""LLMClient's own httpx + SSE wire against real sockets: the loopback model server, and a raw
one for bytes no real server should send. Checks what the ``openai`` SDK handled for us before:
error statuses sorted into fail-fast or retry (``offload.agent.llm_errors``), Retry-After, tool-call
deltas split over many chunks, ``[DONE]``, usage in the final chunk, a malformed chunk."""
from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from offload.agent.llm import LLMClient, LLMError, ModelNotFoundError
from offload.testing.model_server import Reply, error_reply, sequence_script, text_reply

pytestmark = pytest.mark.timeout(30)


def _client(url: str, sleeps: list[float] | None = None, **kwargs) -> LLMClient:
    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"unexpected backoff sleep of {seconds} s")
    options = dict(sleep=no_sleep if sleeps is None else sleeps.append, poll_interval_s=10.0, rng=random.Random(0))
    return LLMClient("demo-model", url, "k", **{**options, **kwargs})


def _turn(client: LLMClient):
    try:
        return client.stream_turn([{"role": "user", "content": "hi"}], [])
    finally:
        client.close()


def test_tool_call_deltas_split_over_chunks_done_and_usage_in_the_final_chunk(model_server):
    calls = [("search", {"q": "caf\u00e9 \u2713", "limit": 3}), ("open_url", '{"url": "http://x.test/a?b=1"}')]
    server = model_server(Reply(text="Let me look", tool_calls=calls, chunk_chars=2))
    turn = _turn(_client(server.url))
    assert turn.content == "Let me look" and turn.finish_reason == "tool_calls"
    assert [(c["name"], json.loads(c["arguments_json"])) for c in turn.tool_calls] == [
        ("search", {"q": "caf\u00e9 \u2713", "limit": 3}), ("open_url", {"url": "http://x.test/a?b=1"})]
    assert len({c["id"] for c in turn.tool_calls}) == 2
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert turn.usage is not None and turn.usage["completion_tokens"] > 0
    assert turn.usage["total_tokens"] == turn.usage["prompt_tokens"] + turn.usage["completion_tokens"]


@pytest.mark.parametrize("reply,cost", [
    (Reply(text="ok", cost_usd=0.00042), 0.00042),  # OpenRouter's usage.cost in the final chunk
    (Reply(text="ok", cost_usd=0.0), 0.0),  # a free model: a known 0
    (Reply(text="ok", headers=[("x-litellm-response-cost", "0.0031")]), 0.0031),  # a LiteLLM proxy's header
    (Reply(text="ok", cost_usd=0.002, headers=[("x-litellm-response-cost", "0.9")]), 0.002),  # the body wins
    (Reply(text="ok", headers=[("x-litellm-response-cost", "None")]), None),  # what a proxy sends when it has none
    (Reply(text="ok", headers=[("x-litellm-response-cost", "-1")]), None),
    (Reply(text="ok"), None),  # most servers: unknown, never 0
])
def test_the_cost_a_provider_reports_is_read_and_an_unreported_one_stays_unknown(model_server, reply, cost):
    turn = _turn(_client(model_server(reply).url))
    assert turn.usage is not None and turn.usage.get("cost_usd") == cost and ("cost_usd" in turn.usage) == (cost is not None)


def test_retryable_statuses_are_retried_honouring_retry_after_then_succeed(model_server):
    failures = [error_reply(429, "slow down", retry_after_s=7), error_reply(503, "overloaded"), error_reply(500, "boom")]
    server = model_server(sequence_script([*failures, text_reply("done")]))
    sleeps: list[float] = []
    turn = _turn(_client(server.url, sleeps, backoff_base_s=2.0, retry_after_cap_s=20.0))
    assert turn.content == "done" and len(server.requests) == 4
    assert sleeps[0] == pytest.approx(7.0)  # Retry-After, one slice as poll_interval_s is longer
    assert 2.0 <= sleeps[1] <= 4.0 and 4.0 <= sleeps[2] <= 8.0  # base * 2**(attempt-1), jitter in [0.5, 1]


def test_persistent_overload_gives_up_after_max_retries_quoting_the_server(model_server):
    server = model_server(error_reply(503, "overloaded"))
    with pytest.raises(LLMError, match="HTTP 503 .*overloaded.*retry later") as info:
        _turn(_client(server.url, [], max_retries=2))
    assert len(server.requests) == 3 and info.value.retryable and info.value.status_code == 503


@pytest.mark.parametrize("reply, model_ids, error, match", [
    (error_reply(401, "Incorrect API key provided"), None, LLMError, "HTTP 401 from .*: the API key was rejected"),
    (text_reply("never sent"), ["other-model"], ModelNotFoundError, "model 'demo-model' does not exist"),
    (error_reply(400, "demo-model is not a valid model ID"), None, ModelNotFoundError, "does not exist"),
    (error_reply(400, "messages[1].content must be a string"), None, LLMError, "HTTP 400 .*must be a string"),
])
def test_fail_fast_statuses_make_one_request_and_say_what_to_fix(model_server, reply, model_ids, error, match):
    server = model_server(reply, model_ids=model_ids)
    with pytest.raises(error, match=match) as info:
        _turn(_client(server.url))
    assert len(server.requests) == 1 and not info.value.retryable
    if error is LLMError:
        assert not isinstance(info.value, ModelNotFoundError)


class _RawServer:
    """Answers every POST with one fixed 200 response body (streamed, then closed; with
    ``hold``, closed only once it is set)."""

    def __init__(self, body: bytes, hold: threading.Event | None = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                if hold is not None:
                    hold.wait(20)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> _RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def test_a_malformed_chunk_is_a_clear_error_naming_the_fix_and_not_retried():
    good = b'data: {"choices": [{"index": 0, "delta": {"content": "par"}, "finish_reason": null}]}\n\n'
    with _RawServer(good + b'data: {"choices": [{"delta": \n\n') as raw:
        expected = r"malformed JSON in the stream from http://127\.0\.0\.1:\d+/v1 .*check base_url"
        with pytest.raises(LLMError, match=expected) as info:
            _turn(_client(raw.url))
    assert not info.value.retryable


def test_a_stream_cut_before_done_after_a_complete_turn_still_returns_it():
    body = (b'data: {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}\n\n'
            b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}}\n\n')
    with _RawServer(body) as raw:
        turn = _turn(_client(raw.url))
    assert (turn.content, turn.finish_reason, turn.usage["total_tokens"]) == ("ok", "stop", 3)


def test_subagents_reuse_one_kept_alive_connection_to_the_model_server(model_server):
    """Each agent has its own LLMClient, but they share the process's HTTP client: a second
    child's call goes over the connection the first one left open, not a new one (a new
    connection and client per subagent were a twentieth of a worker's CPU per unit)."""
    server = model_server(Reply(text="ok"))
    first, second = _client(server.url), _client(server.url)
    assert _turn(first).content == "ok"
    _until_back_in_the_pool()  # a turn returns at [DONE]; its reader puts the connection back after
    assert _turn(second).content == "ok"
    assert len(server.requests) == 2
    assert server.open_connections == 1


def _until_back_in_the_pool(timeout_s: float = 10.0) -> None:
    """Until the shared client holds an idle connection (no event says so: the reader thread
    reads the response's end after the turn returned, slower on a loaded machine)."""
    from offload.agent.llm import shared_http_client

    pool = shared_http_client()._transport._pool
    deadline = time.monotonic() + timeout_s
    while not any(connection.is_idle() for connection in pool.connections):
        assert time.monotonic() < deadline, "the first call's connection never went back to the pool"
        time.sleep(0.005)


def test_a_server_that_keeps_the_stream_open_after_done_does_not_hold_the_turn():
    """After [DONE] the rest of the response is read (to keep the connection), but the turn is
    returned at [DONE]: a server that never ends the response does not hold the caller."""
    body = (b'data: {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}\n\n'
            b'data: [DONE]\n\n')
    release = threading.Event()
    with _RawServer(body, hold=release) as raw:
        try:
            turn = _turn(_client(raw.url, stream_idle_timeout_s=15.0))
            assert (turn.content, turn.finish_reason) == ("ok", "stop")
        finally:
            release.set()


def test_calls_one_after_another_reuse_the_reader_threads(model_server):
    """A stream's reader thread waits for the next stream when it is done (starting a thread
    per model call cost the caller a wait for it), and folds the chunks in there: the
    observers are told on the reader, not the caller. (A reader still reading the end of its
    response after [DONE] is busy, so the next call may take another one.)"""
    server = model_server(Reply(text="ok"))
    readers: set[threading.Thread] = set()
    client = _client(server.url)
    for _ in range(6):
        turn = client.stream_turn([{"role": "user", "content": "hi"}], [],
                                  on_activity=lambda: readers.add(threading.current_thread()))
        assert turn.content == "ok"
    assert 1 <= len(readers) <= 3 and threading.current_thread() not in readers
