"""Every server's own "no such model" answer is recognised (issue 28, point 2).

Each body below is what that server sends, recorded from its source or from users' reports of
it (cited per case); the test serves it through httpx.MockTransport to the real ``LLMClient``,
which must raise ``ModelNotFoundError`` (exit code 4), and the rendered result of a child that
failed so must carry the SUBAGENT MODEL REJECTED notice.
"""
from __future__ import annotations

import json

import httpx
import pytest

from offload.agent.llm import LLMClient, LLMError, ModelNotFoundError
from offload.render.model_rejection import says_model_not_found
from offload.render.notification import format_event
from llm_fakes import BASE_URL, ScriptedServer

WORDINGS = {
    # OpenAI's API reference (error codes): a 404 with code model_not_found; Groq sends the same.
    "openai": ("gpt-9", 404, {"error": {
        "message": "The model `gpt-9` does not exist or you do not have access to it.",
        "type": "invalid_request_error", "param": None, "code": "model_not_found"}}),
    # OpenRouter: a 400 (the reference's acceptance suite carries this wording).
    "openrouter": ("upstage/solar-pro-4", 400, {"error": {
        "message": "upstage/solar-pro-4 is not a valid model ID", "code": 400}}),
    # Ollama's OpenAI-compatible endpoint (ollama/ollama; reported in QAnything #555).
    "ollama": ("llama9", 404, {"error": {
        "message": 'model "llama9" not found, try pulling it first', "type": "api_error", "param": None,
        "code": None}}),
    # vLLM's OpenAI server: no "error" wrapper (vllm-project/vllm #3485).
    "vllm": ("Qwen/Qwen9", 404, {
        "object": "error", "message": "The model `Qwen/Qwen9` does not exist.", "type": "NotFoundError",
        "param": None, "code": 404}),
    # llama.cpp's llama-server in router mode (tools/server/server-models.cpp, router_validate_model).
    "llama.cpp": ("x", 400, {"error": {"code": 400, "message": "model 'x' not found",
                                       "type": "invalid_request_error"}}),
    # LiteLLM proxy (BerriAI/litellm #9663): the proxy's HTTPException text inside an OpenAI error.
    "litellm": ("gpt-9", 400, {"error": {
        "message": "400: {'error': '/chat/completions: Invalid model name passed in model=gpt-9. Call "
                   "`/v1/models` to view available models for your key.'}",
        "type": "None", "param": "None", "code": "400"}}),
}


def _call(model: str, status: int, body: dict) -> LLMError:
    server = ScriptedServer(httpx.Response(status, content=json.dumps(body).encode(),
                                           headers={"content-type": "application/json"}))
    client = LLMClient(model, BASE_URL, "k", http_client=server.http_client(), max_retries=0)
    with pytest.raises(LLMError) as caught:
        client.stream_turn([{"role": "user", "content": "hi"}], None)
    return caught.value


@pytest.mark.parametrize("server", sorted(WORDINGS))
def test_the_client_calls_each_servers_rejection_a_missing_model(server):
    model, status, body = WORDINGS[server]
    error = _call(model, status, body)
    assert isinstance(error, ModelNotFoundError), f"{server}: {error}"
    assert f"model '{model}' does not exist at {BASE_URL}" in str(error)


@pytest.mark.parametrize("server", sorted(WORDINGS))
def test_a_child_rejected_so_gets_the_subagent_model_rejected_notice(server):
    model, status, body = WORDINGS[server]
    error = str(_call(model, status, body))
    evt = {"type": "async_delegation", "delegation_id": "deleg_r", "status": "failed", "goal": "work",
           "summary": None, "error": error, "session_key": "", "origin_session_id": "",
           "subagent_config": {"model": model, "provider": server, "has_fallback": False}}
    assert "SUBAGENT MODEL REJECTED" in format_event(evt)


@pytest.mark.parametrize("server", sorted(WORDINGS))
def test_the_raw_provider_message_matches_too(server):
    """The notice also reads a summary that quotes the provider directly (hermes children did)."""
    _, _, body = WORDINGS[server]
    assert says_model_not_found(json.dumps(body)) or says_model_not_found((body.get("error") or body)["message"])


@pytest.mark.parametrize("message", [
    "the request exceeds the available context size, try increasing it",  # llama.cpp, too long a prompt
    "file not found: /tmp/x",
    "model is loading, please retry",
    "'messages' must contain the word 'json'",
])
def test_other_400s_are_not_called_a_missing_model(message):
    error = _call("m", 400, {"error": {"message": message, "type": "invalid_request_error"}})
    assert not isinstance(error, ModelNotFoundError)
    assert not says_model_not_found(message)
