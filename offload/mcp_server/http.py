"""``offload mcp --http``: the MCP server over Streamable HTTP (the SDK's app under uvicorn),
behind the checks the MCP transport spec asks for.

Invariants, each applied before a request reaches the SDK:
- Host: only the names ``offload.http_security`` allows (loopback names, the bound address,
  ``--allow-host`` names), the one check of every HTTP server offload runs (DNS rebinding);
- Origin: a request carrying an ``Origin`` header must come from one of those same names and
  the server's own port, so a page on another site, or another service on localhost, cannot
  drive the server from a browser;
- sessions: an idle one expires after ``SESSION_IDLE_S`` (longer than the longest wait), so
  clients that vanish do not accumulate; no namespace depends on a session;
- token: with ``--token``, every request carries ``Authorization: Bearer TOKEN`` (compared in
  constant time); the 401 keeps ``WWW-Authenticate: Bearer``, and the OAuth discovery it starts
  in some clients (``/.well-known/...``) fails at once with a 404 saying to send the token; the token is the outer boundary between clients, namespaces sit inside it. A
  bind off loopback without a token is refused before anything listens.
"""
from __future__ import annotations

import hmac
import socket
from typing import Callable, Iterable
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from offload.errors import CliError
from offload import http_security
from offload.http_security import HostCheck, HostGuard

MCP_PATH = "/mcp"
_DEFAULT_PORTS = {"http": 80, "https": 443}
LISTEN_BACKLOG = 2048  # uvicorn's own default
SESSION_IDLE_S = 3900.0  # an idle session expires after longer than the longest wait (3600 s)
SHUTDOWN_GRACE_S = 5  # in-flight requests end at once on SIGTERM (waits are woken); a stream left open is cut


def check_bind(host: str, token: str | None) -> None:
    """Refuse a bind off loopback without a token: anyone reaching it could start subagents."""
    http_security.check_bind(host, token, serving="MCP", exposure="start, read and stop subagents",
                             token_use="clients send Authorization: Bearer SECRET")


class OriginGuard:
    """ASGI middleware: a request with an ``Origin`` must name a host the server answers to."""

    def __init__(self, app: ASGIApp, check: HostCheck) -> None:
        self.app, self.check = app, check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope) if scope["type"] == "http" else None
        origin = headers.get("origin") if headers is not None else None
        if origin is not None and not self._accepts(origin, headers.get("host")):
            refusal = PlainTextResponse(f"403: requests from the web origin {origin!r} are refused (MCP clients send "
                                        "no Origin, or one of this server's own names and its port)\n", status_code=403)
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _accepts(self, origin: str, host: str | None) -> bool:
        """The origin names a host this server answers to, on this server's port (the Host
        header's): another service on localhost is another origin."""
        try:
            parts = urlsplit(origin)
            served = urlsplit(f"//{host}") if host else None
            origin_port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
            served_port = (served.port or 80) if served is not None else None
        except ValueError:
            return False
        return bool(parts.netloc) and self.check.accepts(parts.netloc) and origin_port == served_port


NO_OAUTH = PlainTextResponse("404: this MCP server does not use OAuth; send Authorization: Bearer <token> (the "
                              "--token it was started with)\n", status_code=404)


class BearerGuard:
    """ASGI middleware: ``Authorization: Bearer TOKEN`` on every request when a token is set."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token and scope["type"] == "http" and str(scope.get("path", "")).startswith("/.well-known/"):
            # A client seeing the 401 looks for OAuth metadata: there is none, and it must learn so at
            # once (a 401 here too would send it through a whole OAuth flow first).
            await NO_OAUTH(scope, receive, send)
            return
        if self.token and scope["type"] == "http" and not self._authorized(Headers(scope=scope)):
            refusal = PlainTextResponse("401: this MCP server needs Authorization: Bearer <token> (the --token it was "
                                        "started with)\n", status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, headers: Headers) -> bool:
        scheme, _, value = (headers.get("authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode())


def http_app(server: MCPServer, host: str, token: str | None, allowed_hosts: Iterable[str] = ()) -> ASGIApp:
    """The SDK's Streamable HTTP app at ``/mcp`` behind the Host, Origin and token checks (the
    SDK's own header check is off: ours is the one offload applies everywhere)."""
    check_bind(host, token)
    hosts = HostCheck(host, allowed_hosts)
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host, session_idle_timeout=SESSION_IDLE_S,
                                     transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return HostGuard(OriginGuard(BearerGuard(app, token), hosts), hosts)


def serve_http(server: MCPServer, host: str, port: int, token: str | None, allowed_hosts: Iterable[str] = (),
               on_start: Callable[[str], None] | None = None, on_exit: Callable[[], None] | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM (uvicorn's handling); ``on_start(url)`` once the port is
    bound (port 0 = any free port, so a caller learns which); ``on_exit()`` as the signal
    arrives, so long polls end at once with their current state instead of holding the
    shutdown (uvicorn waits for in-flight requests, at most ``SHUTDOWN_GRACE_S``)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
            if on_exit is not None:
                on_exit()
            super().handle_exit(sig, frame)

    app = http_app(server, host, token, allowed_hosts)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(LISTEN_BACKLOG)  # listening before we announce: early connects wait for uvicorn to accept
    except OSError as exc:
        sock.close()
        raise CliError(f"offload mcp could not listen on {host}:{port} ({exc.strerror}); pick another with --port "
                       "or --host") from None
    bound, bound_port = sock.getsockname()[:2]
    if on_start is not None:
        on_start(f"http://{'[' + bound + ']' if ':' in bound else bound}:{bound_port}{MCP_PATH}")
    Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
           ).run(sockets=[sock])
