"""How providers say "no such model": one list for the LLM client, which turns such an answer
into ``ModelNotFoundError``, and for the renderer's SUBAGENT MODEL REJECTED notice, which
looks for it in a child's error text. Lower-cased fragments (OpenAI, OpenRouter, vLLM, Ollama,
llama.cpp wordings); a message matches if it contains any of them."""
from __future__ import annotations

from typing import Any, Mapping

MODEL_NOT_FOUND_PATTERNS: tuple[str, ...] = (
    "model_not_found",
    "is not a valid model",
    "not a valid model",
    "does not exist",
    "model not found",
)


def subagent_stamp(config: Mapping[str, Any]) -> dict[str, Any]:
    """What the SUBAGENT MODEL REJECTED notice needs of the ``delegation`` config section,
    stamped into a unit's events at dispatch (key ``subagent_config``): the configured model,
    the provider label and whether a fallback chain exists. The fallback entries themselves are
    not copied: they may name endpoints, and events are stored and shown."""
    return {"model": config.get("model") or None, "provider": config.get("provider") or None,
            "has_fallback": bool(config.get("fallback_providers"))}
