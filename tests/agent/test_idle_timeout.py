"""The silence limit of a model call (issue 28, point 3): a validated config key, global and per
``delegation``, named correctly by the error that hits it; and anything a server sends — an SSE
keep-alive comment, llama.cpp's prompt-progress chunks, which local servers are asked for — is
life, so a slow but healthy server is not failed."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from offload import config as cfg_mod
from offload.agent.core import AIAgent
from offload.agent.llm import LLMClient, LLMError, is_local_server
from offload.config import ConfigError
from offload.runtime import Offload
from offload.subagents.child import build_child_agent
from offload.subagents.config import DelegationConfig
from offload.subagents.tool import resolve_delegation_credentials
from llm_fakes import BASE_URL, ScriptedServer, chunk, error_response, sse_body, sse_response

pytestmark = pytest.mark.timeout(30)


class ManualClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_keep_alives_longer_than_the_limit_are_life_not_silence():
    clock, consumed = ManualClock(), threading.Event()

    def body():
        for _ in range(10):  # ten "seconds" of keep-alives against a three-second limit
            clock.now_s += 1.0
            yield b": keep-alive\n\n"
            assert consumed.wait(5), "the client never took the keep-alive"
            consumed.clear()
        yield sse_body(chunk("done", finish="stop"))

    server = ScriptedServer(httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body()))
    client = LLMClient("m", BASE_URL, "k", http_client=server.http_client(), poll_interval_s=0.01,
                       stream_idle_timeout_s=3.0, clock=clock)
    turn = client.stream_turn([], None, on_activity=consumed.set)
    assert (turn.content, turn.finish_reason) == ("done", "stop")


def test_the_idle_error_names_the_real_settings_and_the_command_that_sets_them():
    clock, consumed, started = ManualClock(), threading.Event(), threading.Event()

    def body():
        yield sse_body(chunk("partial"), done=False)
        assert consumed.wait(5), "the client never took the chunk"
        clock.now_s += 601.0  # then nothing but time passing
        started.wait(5)

    server = ScriptedServer(httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body()))
    client = LLMClient("m", BASE_URL, "k", http_client=server.http_client(), poll_interval_s=0.01,
                       stream_idle_timeout_s=600.0, clock=clock, max_retries=0)
    try:
        with pytest.raises(LLMError) as caught:
            client.stream_turn([], None, on_activity=consumed.set)
    finally:
        started.set()
    message = str(caught.value)
    assert "sent nothing for 600 s" in message
    assert "raise stream_idle_timeout_s: offload config set stream_idle_timeout_s 1200" in message  # its own key, doubled
    command = message.split("offload config set ", 1)[1].split()
    assert cfg_mod.set_value(command[0], command[1]) == (1200, [])  # the hint's command works as printed


def test_a_childs_client_names_the_delegation_key(tmp_path: Path):
    parent = AIAgent(model="m", base_url=BASE_URL, api_key="k", toolsets=[], workspace=tmp_path)
    child = parent.build_child(task_index=0, goal="g", context=None, toolsets=[])
    assert (parent.llm.idle_timeout_key, child.llm.idle_timeout_key) == (
        "stream_idle_timeout_s", "delegation.stream_idle_timeout_s")


@pytest.mark.parametrize("key", ["stream_idle_timeout_s", "delegation.stream_idle_timeout_s"])
def test_both_keys_are_validated_settings(key):
    assert cfg_mod.set_value(key, "900") == (900, [])
    assert cfg_mod.get_value(key) == 900
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        cfg_mod.set_value(key, "0")


def test_the_parent_and_its_children_get_their_limits(tmp_path: Path):
    cfg = cfg_mod.OffloadConfig(base_url="http://127.0.0.1:9/v1", workspace=str(tmp_path), stream_idle_timeout_s=700)
    with Offload(cfg, home=tmp_path) as off:
        parent = off.build_agent("sess_x", api_key="")
    assert parent.llm.stream_idle_timeout_s == 700

    def child_with(delegation: DelegationConfig) -> AIAgent:
        creds = resolve_delegation_credentials(delegation, parent)
        return build_child_agent(task_index=0, goal="g", context=None, toolsets=None, role="leaf", creds=creds,
                                 max_iterations=3, parent_agent=parent)

    assert child_with(DelegationConfig()).llm.stream_idle_timeout_s == 700  # inherited
    assert child_with(DelegationConfig(stream_idle_timeout_s=1800)).llm.stream_idle_timeout_s == 1800


@pytest.mark.parametrize("url, local", [
    ("http://127.0.0.1:8080/v1", True), ("http://localhost:11434/v1", True), ("http://192.168.1.9:8000/v1", True),
    ("http://llama:8080/v1", True), ("http://[::1]:8080/v1", True), ("http://gpu-box.lan/v1", True),
    ("https://api.openai.com/v1", False), ("https://openrouter.ai/api/v1", False), ("http://8.8.8.8/v1", False),
])
def test_only_local_servers_are_asked_for_prompt_progress(url, local):
    assert is_local_server(url) is local


def _client_for(url: str, server: ScriptedServer) -> LLMClient:
    return LLMClient("m", url, "k", http_client=server.http_client(), poll_interval_s=0.01, max_retries=0)


def test_a_local_server_is_asked_for_progress_and_a_hosted_one_is_not():
    local = ScriptedServer(sse_response(chunk("ok", finish="stop")))
    _client_for("http://127.0.0.1:8080/v1", local).stream_turn([], None)
    hosted = ScriptedServer(sse_response(chunk("ok", finish="stop")))
    _client_for("https://api.example.com/v1", hosted).stream_turn([], None)
    assert local.bodies()[0]["return_progress"] is True
    assert "return_progress" not in hosted.bodies()[0]


def test_a_server_refusing_return_progress_is_asked_again_without_it_and_not_again_later():
    server = ScriptedServer(
        error_response(400, "Unrecognized request argument supplied: return_progress"),
        sse_response(chunk("ok", finish="stop")),
        sse_response(chunk("again", finish="stop")),
    )
    client = _client_for("http://127.0.0.1:4000/v1", server)
    assert client.stream_turn([], None).content == "ok"
    assert client.stream_turn([], None).content == "again"
    first, second, third = server.bodies()
    assert first["return_progress"] is True and "return_progress" not in second and "return_progress" not in third
    assert second["stream_options"] == {"include_usage": True}  # only the refused field went


def test_progress_chunks_count_as_life_and_add_nothing_to_the_answer():
    progress = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}],
                "prompt_progress": {"total": 4096, "cache": 0, "processed": 2048, "time_ms": 90000}}
    server = ScriptedServer(sse_response(progress, progress, chunk("Hi", finish="stop")))
    seen: list[int] = []
    turn = _client_for("http://127.0.0.1:8080/v1", server).stream_turn([], None, on_activity=lambda: seen.append(1))
    assert (turn.content, len(seen)) == ("Hi", 3)
    assert json.loads(server.requests[0].content)["return_progress"] is True
