"""Who may reach the dashboard: the token check and the same-origin check of every action.

The dashboard decides for a person (approvals, interrupt, drop), so on loopback too every
request must show the token (``offload.access.tokens``: the home's operator token, or
``OFFLOAD_DASHBOARD_TOKEN``): any local process — a prompt-injected child's command among
them — could otherwise press the buttons.

Invariants:
- a request is served only with ``Authorization: Bearer TOKEN``, the session cookie, or (GET
  only) ``?token=TOKEN``, which sets the cookie and redirects to the same address without it;
  anything else gets 401 and a page saying how to open the dashboard;
- the cookie holds ``cookie_value(token)`` (an HMAC of the token, never the token itself, so
  it opens this dashboard and nothing else) and is named per port (``cookie_name``): browsers
  share cookies across the ports of one host, and two dashboards must not overwrite each
  other's; rotating the token (``offload token rotate``) ends every cookie;
- a state-changing request (POST …) must carry an ``Origin`` naming this very dashboard
  (scheme-less host:port equal to the request's Host): a missing ``Origin`` is refused, so
  neither another web page in the same browser nor a plain script can press a button
  without being the dashboard's own page (scripts send the header deliberately).
"""
from __future__ import annotations

import hashlib
import hmac
from html import escape
from typing import Callable

from starlette.datastructures import URL
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from offload.access.http import origin_netloc
from offload.access.tokens import same_token as _matches

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_COOKIE_PURPOSE = b"offload dashboard session cookie v1"
_NEEDS_TOKEN = ("This dashboard needs its token. Open the address `offload dashboard` printed when it started "
                "(it ends in ?token=...; your browser then keeps a cookie), or run `offload token show` and open "
                "/?token=THAT. Scripts and Prometheus send 'Authorization: Bearer TOKEN'.")


def cookie_name(port: int) -> str:
    return f"offload_dashboard_{port}"


def cookie_value(token: str) -> str:
    """What the browser keeps: derived from the token, useless as a bearer token or for MCP."""
    return hmac.new(token.encode(), _COOKIE_PURPOSE, hashlib.sha256).hexdigest()


class Guard:
    """ASGI middleware: the token on every request, and same-origin state changes."""

    def __init__(self, app: ASGIApp, token: Callable[[], str]) -> None:
        self.app = app
        self.token = token  # the token accepted now (read per request: a rotation applies at once)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        token = self.token()
        if scope.get("method") in ("GET", "HEAD") and _matches(conn.query_params.get("token", ""), token):
            await _adopt_token(conn, token)(scope, receive, send)
            return
        refusal = _refusal(conn, token)
        if refusal is not None and scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # refused before the handshake
            return
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _port(conn: HTTPConnection) -> int:
    server = conn.scope.get("server") or (None, 0)
    return int(server[1] or 0)


def _offered(conn: HTTPConnection, token: str) -> str | None:
    """How the request shows the token ("bearer", "cookie", "query"), None if it does not."""
    scheme, _, value = conn.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and _matches(value.strip(), token):
        return "bearer"
    cookie = conn.cookies.get(cookie_name(_port(conn)), "")
    if _matches(cookie, cookie_value(token)):
        return "cookie"
    if _matches(conn.query_params.get("token", ""), token):
        return "query"
    return None


def _refusal(conn: HTTPConnection, token: str) -> Response | None:
    how = _offered(conn, token)
    if how is None or how == "query":  # ?token= signs a browser in (GET); it never authorizes an action
        return _unauthorized(conn)
    if conn.scope.get("method", "GET") not in _SAFE_METHODS and not same_origin(conn):
        return PlainTextResponse("403: this action needs an Origin header naming this dashboard (its own pages "
                                 "send it; a script adds -H 'Origin: http://HOST:PORT'); cross-site requests and "
                                 "requests without an Origin are refused.\n", status_code=403)
    return None


def _unauthorized(conn: HTTPConnection) -> Response:
    headers = {"WWW-Authenticate": 'Bearer realm="offload dashboard"', "Cache-Control": "no-store"}
    if "text/html" in conn.headers.get("accept", ""):
        body = (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>offload dashboard: token needed"
                f"</title></head><body><h1>401: token needed</h1><p>{escape(_NEEDS_TOKEN)}</p></body></html>")
        return HTMLResponse(body, status_code=401, headers=headers)
    return PlainTextResponse(f"401: {_NEEDS_TOKEN}\n", status_code=401, headers=headers)


def _adopt_token(conn: HTTPConnection, token: str) -> Response:
    """Keep the derived value in an http-only cookie and drop the token from the address bar."""
    clean = URL(scope=conn.scope).remove_query_params("token")
    response = RedirectResponse(clean.path + (f"?{clean.query}" if clean.query else ""), status_code=303)
    response.set_cookie(cookie_name(_port(conn)), cookie_value(token), httponly=True, samesite="strict", path="/")
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def same_origin(conn: HTTPConnection) -> bool:
    """The request's ``Origin`` is this dashboard's own (same host:port as its Host header)."""
    netloc = origin_netloc(conn.headers.get("origin"))
    host = conn.headers.get("host", "")
    return netloc is not None and netloc.lower().rstrip(".") == host.lower().rstrip(".")
