"""Errors of the LLM client and the rule that sorts a failed request into retry or fail-fast.

Owns: ``LLMError`` / ``ModelNotFoundError``, ``classify_status`` (HTTP status + body → what to
do) and ``retry_after_s`` (the wait the server asked for). Invariant: every message names who
must act and how, and a rejected model's message always contains the model name plus the
phrase "does not exist", because the parent's "SUBAGENT MODEL REJECTED" notice detects it by
exactly that text. No I/O, no SDK imports.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlparse

from offload.engine.errors import OffloadError
from offload.render.model_rejection import says_model_not_found


RETRYABLE_STATUSES = frozenset({408, 409, 429})
# A version segment anywhere in the path: /v1, OpenRouter's /api/v1, Groq's /openai/v1, Gemini's
# /v1beta/openai. Every OpenAI-compatible server listed in docs/models.md serves its API under one.
_VERSION_SEGMENT = re.compile(r"/v\d+[a-z0-9]*(/|$)")
_PROVIDER_MESSAGE_MAX_CHARS = 500


class LLMError(OffloadError):
    """A model call failed in a way retrying will not fix (or retries ran out)."""

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable


class ModelNotFoundError(LLMError):
    """The provider says the configured model does not exist; the user must pick another."""

    def __init__(self, message: str, *, model: str, status_code: int | None = None) -> None:
        super().__init__(message, status_code=status_code)
        self.model = model


@dataclass(frozen=True)
class StatusVerdict:
    """What to do with an HTTP error status: retry it, or raise ``error`` now."""

    retryable: bool
    error: LLMError | None = None


def provider_message(body: Any) -> str:
    """The human part of an error body (``{"message": ...}`` or raw text), bounded in size."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            text = inner["message"]
        else:
            text = json.dumps(body, default=str)
    elif body is None:
        text = ""
    else:
        text = str(body)
    text = " ".join(text.split())
    if len(text) > _PROVIDER_MESSAGE_MAX_CHARS:
        text = text[: _PROVIDER_MESSAGE_MAX_CHARS] + "…"
    return text or "(no error message in the response body)"


def missing_api_version(base_url: str, key: str = "base_url") -> str | None:
    """The one-line fix when ``base_url`` has no version segment in its path (``http://host:8080``
    where the server answers at ``http://host:8080/v1``), else None: a warning, never a refusal,
    because a server may serve the API at a path of its own."""
    parsed = urlparse(base_url)
    if _VERSION_SEGMENT.search(parsed.path or "/"):
        return None
    fixed = base_url.rstrip("/") + "/v1"
    return (f"{key} {base_url} has no version segment such as /v1 in its path, where OpenAI-compatible "
            f"servers serve their API: offload config set {key} {fixed} (ignore this if yours serves it there)")


def _says_model_missing(status: int, body_text: str) -> bool:
    if status == 404:
        return True
    return status == 400 and says_model_not_found(body_text)


def classify_status(status: int, body: Any, *, model: str, base_url: str) -> StatusVerdict:
    """Sort an HTTP error status into retry (429/5xx/408/409) or a fail-fast error."""
    if status in RETRYABLE_STATUSES or status >= 500:
        return StatusVerdict(retryable=True)
    message = provider_message(body)
    body_text = json.dumps(body, default=str) if not isinstance(body, str) else body
    if status == 404 and "model" not in (body_text + message).lower() and missing_api_version(base_url):
        return StatusVerdict(False, LLMError(
            f"HTTP 404 from {base_url}: no API there; base_url most likely needs its /v1 API root: "
            f"offload config set base_url {base_url.rstrip('/')}/v1 ({message})", status_code=status))
    if _says_model_missing(status, body_text + " " + message):
        hint = ""
        if status == 404 and "model" not in (body_text + message).lower():
            # A bare 404 is more often a base_url missing its /v1 than a missing model.
            hint = " (if the model name is right, check that base_url points at the /v1 API root)"
        text = f"HTTP {status}: model '{model}' does not exist at {base_url}: {message}{hint}"
        return StatusVerdict(False, ModelNotFoundError(text, model=model, status_code=status))
    return StatusVerdict(False, LLMError(_client_error_text(status, message, model, base_url), status_code=status))


def _client_error_text(status: int, message: str, model: str, base_url: str) -> str:
    if status == 401:
        return (
            f"HTTP 401 from {base_url}: the API key was rejected; set OPENAI_API_KEY or "
            f"delegation.api_key to a valid key for this endpoint ({message})"
        )
    if status == 403:
        return (
            f"HTTP 403 from {base_url}: the API key may not use model '{model}'; use a key with "
            f"access to it or choose another model ({message})"
        )
    if status == 413:
        return f"HTTP 413 from {base_url}: the request is too large for the server; shorten the conversation ({message})"
    return (
        f"HTTP {status} from {base_url}: the server rejected the request for model '{model}' "
        f"and retrying will not help; check the model's parameters and server logs ({message})"
    )


def retry_after_s(headers: Any, *, cap_s: float, now_s: float) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``retry-after``), capped.

    ``retry-after`` may be seconds or an HTTP date; ``now_s`` is the wall clock for the date
    form. Unparseable or absent → None, and the caller falls back to exponential backoff.
    """
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return _clamp(float(raw_ms) / 1000.0, cap_s)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return _clamp(float(raw), cap_s)
    except ValueError:
        pass
    try:
        return _clamp(parsedate_to_datetime(raw).timestamp() - now_s, cap_s)
    except (TypeError, ValueError, IndexError):
        return None


def _clamp(value_s: float, cap_s: float) -> float:
    return max(0.0, min(value_s, cap_s))
