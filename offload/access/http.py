"""The Host check of every HTTP server offload runs (the dashboard; the MCP server reuses it):
the defence against DNS rebinding. (Both require a token on every request, loopback included:
``offload.access.tokens``.)

A web page on ``evil.example`` whose DNS name is then rebound to 127.0.0.1 makes the browser
send requests to our loopback port with ``Host: evil.example:PORT`` and a matching ``Origin``;
to the browser they are same-origin, so the cross-site check cannot refuse them, and the page
could read every goal and result and press every button. A server therefore answers only to
the names it serves: the loopback names (127.0.0.1, localhost, [::1]), the address it binds,
and names the user allows explicitly (``--allow-host``). When it binds every interface
(0.0.0.0, ::) an IP-address Host is accepted too: rebinding needs a DNS name, so an address
literal cannot be one, and that is how such a server is reached.

An ``Origin`` header is read here too (``origin_netloc``, ``url_port``); what each server accepts
from it differs on purpose: the dashboard wants exactly its own host:port for a state change,
the MCP server any name it answers to on its own port.

Invariant: a request whose Host names anything else is refused (403, saying how to allow the
name) before it reaches the application. A request without a Host header is not a browser's.
"""
from __future__ import annotations

import ipaddress
from typing import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from offload.errors import CliError

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def normal_name(name: str) -> str:
    """A host name as compared: lower case, no brackets, no trailing dot."""
    return name.strip().strip("[]").lower().rstrip(".")


def allowed_name(name: str) -> str:
    """An ``--allow-host`` value, checked: a bare name or address, no scheme, port or path."""
    normal = normal_name(name)
    if not normal or any(c in normal for c in "/@ ") or (":" in normal and not _is_address(normal)):
        raise CliError(f"--allow-host {name!r} is not a host name; give the bare name the browser uses, "
                       "e.g. --allow-host dashboard.internal (no scheme, port or path)")
    return normal


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _binds_every_interface(bind_host: str) -> bool:
    try:
        return ipaddress.ip_address(normal_name(bind_host)).is_unspecified
    except ValueError:
        return False


def request_host(header: str) -> str | None:
    """The host name of a Host header (``name:port``, ``[::1]:port``); None if it is not one."""
    try:
        return urlsplit("//" + header).hostname
    except ValueError:
        return None


def origin_netloc(origin: str | None) -> str | None:
    """The ``host[:port]`` an ``Origin`` header names; None for none, ``null`` or one that does
    not parse. (The dashboard and the MCP server each decide what they accept from it.)"""
    if not origin or origin == "null":
        return None
    try:
        return urlsplit(origin).netloc or None
    except ValueError:
        return None


def url_port(url: str) -> int | None:
    """A URL's port, else its scheme's default (http 80, https 443). ValueError: a bad port."""
    parts = urlsplit(url)
    return parts.port or _DEFAULT_PORTS.get(parts.scheme)


class HostCheck:
    """Which Host names one server answers to."""

    def __init__(self, bind_host: str, allowed: Iterable[str] = ()) -> None:
        self.names = LOOPBACK_NAMES | {normal_name(bind_host)} | {allowed_name(n) for n in allowed}
        self.any_address = _binds_every_interface(bind_host)

    def accepts(self, header: str | None) -> bool:
        if header is None:
            return True
        name = request_host(header)
        if name is None:
            return False
        name = normal_name(name)
        return name in self.names or (self.any_address and _is_address(name))


class HostGuard:
    """ASGI middleware: refuse HTTP and websocket requests for a Host the server does not serve."""

    def __init__(self, app: ASGIApp, check: HostCheck) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            header = Headers(scope=scope).get("host")
            if not self.check.accepts(header) and scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})  # refused before the handshake: 403
                return
            if not self.check.accepts(header):
                name = request_host(header or "") or header
                refusal = PlainTextResponse(
                    f"403: this server does not answer to the name {name!r} (a page on another site may be trying "
                    f"to reach it through DNS rebinding). It answers to {', '.join(sorted(self.check.names))}; "
                    f"to open it under {name!r}, restart it with --allow-host {name}.\n", status_code=403)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
