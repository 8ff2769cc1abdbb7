"""How providers say "no such model": one list for the LLM client, which turns such an answer
into ``ModelNotFoundError``, and for the renderer's SUBAGENT MODEL REJECTED notice, which
looks for it in a child's error text. Lower-cased fragments (OpenAI, OpenRouter, vLLM, Ollama,
llama.cpp wordings); a message matches if it contains any of them."""
from __future__ import annotations

MODEL_NOT_FOUND_PATTERNS: tuple[str, ...] = (
    "model_not_found",
    "is not a valid model",
    "not a valid model",
    "does not exist",
    "model not found",
)
