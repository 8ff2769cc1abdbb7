"""``MatrixClient``: mautrix's asyncio client API on its own event-loop thread, called from the
gateway's blocking threads, with the gateway's retry policy.

The platform seam is blocking (``Platform.poll`` blocks its thread) while mautrix is asyncio:
the client runs one event loop on a daemon thread and every call is a coroutine submitted to
it (``run_coroutine_threadsafe``), so the gateway's threads never share a loop or block one.

Policy (``call``): ``M_LIMIT_EXCEEDED`` waits the ``retry_after_ms`` the server asks for
(capped; mautrix drops the body of a standard error, so a trace hook reads it off the 429
response); 5xx and network errors retry with exponential backoff; ``M_FORBIDDEN`` on a room
raises ``ChatGone`` (the bot was kicked or never joined: retrying cannot help); 401
``M_UNKNOWN_TOKEN`` raises ``MatrixAuthError`` naming the variable to fix; any other 4xx raises
``MatrixError``. When the attempt budget runs out the call raises ``SendFailed`` and the caller
keeps its result pending.

Invariant: the access token never reaches a log or an exception message: it travels only in
the Authorization header, mautrix's request logger is silenced, and errors are rebuilt from the
status and the server's errcode and error text.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any, Awaitable, Callable

import aiohttp
from mautrix.api import HTTPAPI
from mautrix.client import ClientAPI
from mautrix.errors import MatrixConnectionError, MatrixRequestError, MForbidden, MLimitExceeded, MUnknownToken

from offload.gateway.platform import ChatGone, SendFailed

logger = logging.getLogger(__name__)
logging.getLogger("mau").setLevel(logging.WARNING)  # its debug log quotes every request

_RETRY_AFTER_MS: contextvars.ContextVar[float] = contextvars.ContextVar("retry_after_ms", default=0.0)


class MatrixError(Exception):
    """A request the homeserver refused for a reason retrying cannot fix (a bug on our side)."""


class MatrixAuthError(MatrixError):
    """The access token is wrong, revoked or logged out."""


async def _note_retry_after(session: Any, ctx: Any, params: aiohttp.TraceRequestEndParams) -> None:
    """A 429's ``retry_after_ms`` (body) or ``Retry-After`` (header), for the retry policy."""
    if params.response.status != 429:
        return
    wait_ms = 0.0
    try:
        wait_ms = float((await params.response.json()).get("retry_after_ms") or 0)
    except Exception:
        pass
    if not wait_ms:
        try:
            wait_ms = float(params.response.headers.get("Retry-After") or 0) * 1000
        except ValueError:
            wait_ms = 0.0
    _RETRY_AFTER_MS.set(wait_ms)


class MatrixClient:
    def __init__(self, homeserver: str, user_id: str, token: str, *, max_attempts: int = 8,
                 backoff_s: float = 0.5, max_wait_s: float = 30.0, stop: threading.Event | None = None) -> None:
        self.user_id, self.max_attempts, self.backoff_s, self.max_wait_s = user_id, max_attempts, backoff_s, max_wait_s
        self.stop = stop or threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="matrix-loop", daemon=True)
        self._thread.start()
        self.api: ClientAPI = self._run(self._open(homeserver, token))

    async def _open(self, homeserver: str, token: str) -> ClientAPI:
        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(_note_retry_after)
        session = aiohttp.ClientSession(trace_configs=[trace],
                                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=90))
        http = HTTPAPI(homeserver, token, client_session=session, default_retry_count=0)
        return ClientAPI(self.user_id, api=http)

    def _run(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        try:
            self._run(self.api.api.session.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def call(self, what: str, request: Callable[[ClientAPI], Awaitable[Any]]) -> Any:
        """Run ``request(api)`` on the loop with the retry policy above; ``what`` names it in logs."""
        last = "no attempt made"
        for attempt in range(self.max_attempts):
            wait_s, last = self._attempt(what, request)
            if wait_s is None:
                return last
            if attempt + 1 == self.max_attempts:
                break
            wait_s = min(self.backoff_s * 2 ** attempt if wait_s < 0 else wait_s, self.max_wait_s)
            logger.info("matrix %s: %s; retrying in %.1f s (attempt %d/%d)", what, last, wait_s,
                        attempt + 1, self.max_attempts)
            if self.stop.wait(wait_s):
                break
        raise SendFailed(f"matrix {what} still failing after {self.max_attempts} attempts: {last}")

    def _attempt(self, what: str, request: Callable[[ClientAPI], Awaitable[Any]]) -> tuple[float | None, Any]:
        """(None, result) on success, or (seconds to wait, -1 for backoff; why) when retryable."""
        async def once() -> tuple[float | None, Any]:
            _RETRY_AFTER_MS.set(0.0)
            try:
                return None, await request(self.api)
            except MLimitExceeded:
                return max(_RETRY_AFTER_MS.get() / 1000, 0.05), "429 M_LIMIT_EXCEEDED"
        try:
            return self._run(once())
        except MUnknownToken:
            raise MatrixAuthError("the homeserver rejected the access token (401 M_UNKNOWN_TOKEN): check the "
                                  "variable gateway.matrix.token_env names, or log the bot in again for a new "
                                  "token") from None
        except MForbidden as exc:
            raise ChatGone(f"403 M_FORBIDDEN ({exc.message})") from None
        except MatrixRequestError as exc:
            status = getattr(exc, "http_status", 0)
            if status >= 500:
                return -1.0, f"{status} {getattr(exc, 'errcode', '')}"
            raise MatrixError(f"matrix {what} refused: {status} {getattr(exc, 'errcode', '')} "
                              f"{getattr(exc, 'message', '')}") from None
        except (MatrixConnectionError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return -1.0, f"network error ({type(exc).__name__})"
