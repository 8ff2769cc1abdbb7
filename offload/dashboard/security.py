"""Who may reach the dashboard: the bind rule, the token check and the cross-site check.

Invariants: a bind to anything but loopback is refused without a token; with a token, every
HTTP request must carry it (``Authorization: Bearer``, the cookie set by the first visit, or
``?token=`` once, which sets the cookie); a state-changing request whose ``Origin`` is not
the dashboard itself is refused, so another web page open in the same browser cannot click
the buttons for you.
"""
from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.datastructures import URL
from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from offload import http_security

COOKIE = "offload_dashboard_token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback bind without a token: the page can interrupt and drop work."""
    http_security.check_bind(host, token, serving="the dashboard", exposure="interrupt and drop delegations",
                             token_use="checked on every request")

class Guard:
    """ASGI middleware: token on every request (when set) and same-origin state changes."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        refusal = self._refusal(conn)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if self.token and conn.query_params.get("token"):
            await self._adopt_token(conn)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, conn: HTTPConnection) -> Response | None:
        if self.token and not self._authorized(conn):
            return PlainTextResponse("401: this dashboard needs its token. Open it with ?token=SECRET once "
                                     "(it is then kept in a cookie) or send 'Authorization: Bearer SECRET'.\n",
                                     status_code=401, headers={"WWW-Authenticate": "Bearer"})
        if conn.scope["method"] not in _SAFE_METHODS and not _same_origin(conn):
            return PlainTextResponse("403: cross-site request refused; use the dashboard's own buttons.\n",
                                     status_code=403)
        return None

    def _authorized(self, conn: HTTPConnection) -> bool:
        header = conn.headers.get("authorization", "")
        offered = [header[7:] if header.lower().startswith("bearer ") else "",
                   conn.cookies.get(COOKIE, ""), conn.query_params.get("token", "")]
        return any(o and hmac.compare_digest(o.encode(), self.token.encode()) for o in offered)

    def _adopt_token(self, conn: HTTPConnection) -> Response:
        """Keep the token in an http-only cookie and drop it from the address bar."""
        clean = URL(scope=conn.scope).remove_query_params("token")
        response = RedirectResponse(clean.path + (f"?{clean.query}" if clean.query else ""), status_code=303)
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
        return response

def _same_origin(conn: HTTPConnection) -> bool:
    origin = conn.headers.get("origin")
    if origin is None:  # not sent by a browser for this request: a script or curl, which holds the token
        return True
    return urlsplit(origin).netloc == conn.headers.get("host", "")
