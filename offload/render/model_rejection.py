"""How providers say "no such model", in one place: the LLM client turns such an answer into
``ModelNotFoundError`` (exit code 4), and the renderer's SUBAGENT MODEL REJECTED notice looks for
it in a child's error text.

The shapes of the servers users run, each recorded from the server's own wording (the tests in
``tests/render/test_rejection_wordings.py`` hold one real body per server):

==============  ======  =====================================================================
server          status  message
==============  ======  =====================================================================
OpenAI, Groq    404     The model `gpt-9` does not exist or you do not have access to it.
                        (``code``: ``model_not_found``)
OpenRouter      400     upstage/solar-pro-4 is not a valid model ID
Ollama          404     model "llama9" not found, try pulling it first
vLLM            404     The model `Qwen/Qwen9` does not exist.
llama.cpp       400     model 'x' not found (router mode, ``llama-server --models-dir``)
LiteLLM proxy   400     /chat/completions: Invalid model name passed in model=gpt-9. Call
                        `/v1/models` to view available models for your key.
==============  ======  =====================================================================

Any 404 from the chat endpoint already counts as a missing model (the client adds a base_url
hint when the body does not mention a model); the patterns matter for the 400s and for the
notice, which reads error text. Invariant: a pattern names a missing *model*, never just
"not found", so an unrelated 400 ("file not found" in a tool message) is not called a rejection.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

MODEL_NOT_FOUND_PATTERNS: tuple[str, ...] = (
    "model_not_found",  # OpenAI's error code
    "is not a valid model",  # OpenRouter
    "not a valid model",
    "does not exist",  # OpenAI, Groq, vLLM; and offload's own ModelNotFoundError text
    "model not found",
    "invalid model name",  # LiteLLM proxy
)
# ``model 'x' not found`` (llama.cpp), ``model "x" not found`` (Ollama): a quoted name between.
_QUOTED_MODEL_NOT_FOUND = re.compile(r"""\bmodel\s+(['"`])[^'"`]{1,300}\1\s+(?:is\s+)?not\s+found""")


def says_model_not_found(text: str) -> bool:
    """True if ``text`` (an error body or message, any case) is a provider saying the model is missing."""
    lowered = text.lower()
    return any(pattern in lowered for pattern in MODEL_NOT_FOUND_PATTERNS) or bool(
        _QUOTED_MODEL_NOT_FOUND.search(lowered))


def subagent_stamp(config: Mapping[str, Any]) -> dict[str, Any]:
    """What the SUBAGENT MODEL REJECTED notice needs of the ``delegation`` config section,
    stamped into a unit's events at dispatch (key ``subagent_config``): the configured model,
    the provider label and whether a fallback chain exists. The fallback entries themselves are
    not copied: they may name endpoints, and events are stored and shown."""
    return {"model": config.get("model") or None, "provider": config.get("provider") or None,
            "has_fallback": bool(config.get("fallback_providers"))}
