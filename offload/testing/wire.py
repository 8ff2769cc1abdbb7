"""OpenAI Chat Completions wire format for the scripted model server (pure: no I/O).

Owns the JSON shapes the server sends: a non-streaming ``chat.completion``, the sequence of
``chat.completion.chunk`` objects of a streamed reply (role, content pieces, tool-call deltas,
finish, optional usage), OpenAI-style error bodies, and the ``/v1/models`` list.

Invariant: the shapes match what the official ``openai`` SDK parses, so the SDK's own
streaming accumulation rebuilds exactly the reply that was scripted. Token counts in ``usage`` are a
rough chars/4 estimate: nothing here is a real model or a real tokenizer.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterator, Mapping, Sequence

from offload.testing.replies import Reply

OWNED_BY = "offload-demo (scripted, not a real model)"

_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    409: ("invalid_request_error", "conflict"),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def sse(payload: Mapping[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <json>`` (or a literal like ``[DONE]``) and a blank line."""
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode("utf-8")


def error_body(status: int, message: str | None = None, error_type: str | None = None, code: str | None = None) -> dict[str, Any]:
    default_type, default_code = _ERROR_KINDS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return {
        "error": {
            "message": message or f"Scripted HTTP {status} from the offload demo model server.",
            "type": error_type or default_type,
            "param": None,
            "code": code if code is not None else default_code,
        }
    }


def model_not_found(model: str) -> dict[str, Any]:
    return error_body(404, f"The model '{model}' does not exist", "invalid_request_error", "model_not_found")


def model_entry(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": OWNED_BY}


def models_list(model_ids: Sequence[str]) -> dict[str, Any]:
    return {"object": "list", "data": [model_entry(m) for m in model_ids]}


def _arguments_json(arguments: Mapping[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(dict(arguments))


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def estimate_usage(request: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
    prompt_chars = len(json.dumps(request.get("messages") or [], ensure_ascii=False))
    completion_chars = len(reply.text) + sum(len(n) + len(_arguments_json(a)) for n, a in reply.tool_calls)
    prompt, completion = math.ceil(prompt_chars / 4), math.ceil(completion_chars / 4)
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if reply.cost_usd is not None:
        usage["cost"] = reply.cost_usd  # OpenRouter's field (and a LiteLLM proxy's, when it is asked to)
    return usage


def chat_completion(
    request: Mapping[str, Any], reply: Reply, completion_id: str, created: int, call_ids: Sequence[str]
) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` object for ``reply``."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": _arguments_json(args)}}
            for call_id, (name, args) in zip(call_ids, reply.tool_calls)
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": request.get("model"),
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": reply.effective_finish_reason if reply.send_finish else None}],
        **({"usage": estimate_usage(request, reply)} if reply.report_usage else {}),
    }


def _chunk(base: Mapping[str, Any], delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}


def stream_chunks(
    request: Mapping[str, Any], reply: Reply, completion_id: str, created: int, call_ids: Sequence[str]
) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply, in order, without ``[DONE]``.

    A hanging reply stops before the finish chunk: the stream is never completed.
    """
    base = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": request.get("model"),
        "system_fingerprint": None,
    }
    yield _chunk(base, {"role": "assistant", "content": "" if reply.text or not reply.tool_calls else None, "refusal": None})
    for piece in _pieces(reply.text, reply.chunk_chars):
        yield _chunk(base, {"content": piece})
    for index, (call_id, (name, args)) in enumerate(zip(call_ids, reply.tool_calls)):
        start = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        yield _chunk(base, {"tool_calls": [start]})
        for piece in _pieces(_arguments_json(args), reply.chunk_chars):
            yield _chunk(base, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    if reply.hang:
        return
    if reply.send_finish:
        yield _chunk(base, {}, reply.effective_finish_reason)
    if (request.get("stream_options") or {}).get("include_usage") and reply.report_usage:
        yield {**base, "choices": [], "usage": estimate_usage(request, reply)}
