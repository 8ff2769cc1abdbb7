"""``gen_ai.provider.name`` says who serves a model endpoint: the well-known name for a known API
host, ``openai_compatible`` for any other server speaking the OpenAI API (llama.cpp, vLLM,
Ollama, a proxy), always with the host and port it was, never the URL's path or query."""
from __future__ import annotations

import pytest

from offload.telemetry.spans import MODEL_CALL, provider_of, redact_urls, start_kind


@pytest.mark.parametrize(("base_url", "provider", "host", "port"), [
    ("https://api.openai.com/v1", "openai", "api.openai.com", None),
    ("https://openrouter.ai/api/v1", "openrouter", "openrouter.ai", None),
    ("https://API.GROQ.COM/openai/v1", "groq", "api.groq.com", None),
    ("https://team.openai.azure.com/openai/deployments/x", "azure.ai.openai", "team.openai.azure.com", None),
    ("http://127.0.0.1:8080/v1", "openai_compatible", "127.0.0.1", 8080),
    ("http://gpu-box.lan:11434/v1", "openai_compatible", "gpu-box.lan", 11434),
    ("http://host:notaport/v1", "openai_compatible", "host", None),  # malformed port: still a span
    (None, "openai", None, None),  # no base URL: the client's default, OpenAI
])
def test_the_provider_is_named_by_the_host_that_serves_it(base_url, provider, host, port):
    got = provider_of(base_url)
    assert got["gen_ai.provider.name"] == provider
    assert got["server.port"] == port
    if host is not None:
        assert (got["server.address"] or "") == host


def test_a_model_call_span_carries_the_host_not_the_url():
    name, _, attributes = start_kind(MODEL_CALL, {"model": "m", "base_url": "https://openrouter.ai/api/v1?key=secret"})
    assert name == "chat m"
    assert attributes["gen_ai.provider.name"] == "openrouter" and attributes["server.address"] == "openrouter.ai"
    assert not any("secret" in str(v) or "base_url" in k for k, v in attributes.items())


def test_urls_in_status_messages_and_events_are_cut_to_their_host():
    said = ("HTTP 500 from https://user:pw@proxy.corp:8443/v1/tenant/abc?key=secret for model 'm'; "
            "could not reach http://127.0.0.1:9/v1 (ConnectError) and (https://api.openai.com/v1).")
    assert redact_urls(said) == ("HTTP 500 from proxy.corp:8443 for model 'm'; could not reach 127.0.0.1:9 "
                                 "(ConnectError) and (api.openai.com).")
