"""``offload mcp --http``: the MCP server over Streamable HTTP (the SDK's app under uvicorn),
behind the checks the MCP transport spec asks for.

Invariants, each applied before a request reaches the SDK:
- Host: only the names ``offload.access.http`` allows (loopback names, the bound address,
  ``--allow-host`` names), the one check of every HTTP server offload runs (DNS rebinding);
- Origin: a request carrying an ``Origin`` header must come from one of those same names and
  the server's own port, so a page on another site, or another service on localhost, cannot
  drive the server from a browser;
- sessions: an idle one expires after ``SESSION_IDLE_S`` (longer than the longest wait), so
  clients that vanish do not accumulate; no namespace depends on a session, and a session is
  used with the token that opened it only (``SessionGuard``);
- token: every request carries ``Authorization: Bearer TOKEN`` (compared in constant time), on
  loopback too: any local process (a prompt-injected child's command among them) could
  otherwise start subagents or answer approvals. Accepted: ``$OFFLOAD_MCP_TOKEN`` when set,
  else any token of the home's store (``offload.access.tokens``: the operator's and each named
  client's); the accepting token's name is put in ``scope["state"]["offload_token"]``, and
  ``offload_token_live`` re-checks that token, so a long request notices a revocation. The 401
  keeps ``WWW-Authenticate: Bearer``, and the OAuth discovery it starts in some clients
  (``/.well-known/...``) fails at once with a 404 saying to send the token. The token is the
  boundary between clients: each is its own namespace (``namespaces``), whatever name the
  client reports.
"""
from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Callable, Iterable

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from offload.access import tokens as token_store
from offload.errors import CliError
from offload.access.http import HostCheck, HostGuard, origin_netloc, url_port
from offload.mcp_server.namespaces import STATE_LIVE, STATE_TOKEN

MCP_PATH = "/mcp"
LISTEN_BACKLOG = 2048  # uvicorn's own default
ENV_TOKEN = "OFFLOAD_MCP_TOKEN"
SESSION_IDLE_S = 3900.0  # an idle session expires after longer than the longest wait (3600 s)
SHUTDOWN_GRACE_S = 5  # in-flight requests end at once on SIGTERM (waits are woken); a stream left open is cut


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
        netloc = origin_netloc(origin)
        try:
            origin_port = url_port(origin)
            served_port = url_port(f"http://{host}") if host else None
        except ValueError:
            return False
        return netloc is not None and self.check.accepts(netloc) and origin_port == served_port


NO_OAUTH = PlainTextResponse("404: this MCP server does not use OAuth; send Authorization: Bearer <token> "
                              "(`offload token show`, or one per client: `offload token add NAME`)\n", status_code=404)


Verifier = Callable[[str], "str | None"]  # an offered token -> the name it is known by, or None


def token_verifier(home: Path, token: str | None = None) -> Verifier:
    """Who may call: ``token`` (named "operator") when given, else ``$OFFLOAD_MCP_TOKEN``, else
    any token of ``home``'s store, read per request (a new or revoked client counts at once);
    the store's operator token is made here if missing, so a client can be given it."""
    fixed, _source = token_store.resolve(home, env_var=ENV_TOKEN) if token is None else (
        token_store.check_length(token, "the MCP token given", "pass a long random value"), "")
    if fixed is not None:
        return lambda offered: token_store.OPERATOR if token_store.same_token(offered, fixed) else None
    store = token_store.TokenStore(home)
    store.get(token_store.OPERATOR)
    return store.match


class BearerGuard:
    """ASGI middleware: ``Authorization: Bearer TOKEN`` on every request."""

    def __init__(self, app: ASGIApp, verify: Verifier) -> None:
        self.app, self.verify = app, verify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith("/.well-known/"):
            # A client seeing the 401 looks for OAuth metadata: there is none, and it must learn so at
            # once (a 401 here too would send it through a whole OAuth flow first).
            await NO_OAUTH(scope, receive, send)
            return
        if scope["type"] == "http":
            offered = self._offered(Headers(scope=scope))
            name = self.verify(offered) if offered else None
            if name is None:
                refusal = PlainTextResponse(
                    f"401: this MCP server needs Authorization: Bearer <token> (${ENV_TOKEN} if the server was "
                    "started with it, else a token of its home: `offload token show`, or one per client: "
                    "`offload token add NAME`)\n", status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await refusal(scope, receive, send)
                return
            state = scope.setdefault("state", {})
            state[STATE_TOKEN] = name  # the request's namespace (mcp_server.namespaces)
            state[STATE_LIVE] = lambda: self.verify(offered) == name  # a long wait re-checks it
        await self.app(scope, receive, send)

    @staticmethod
    def _offered(headers: Headers) -> str | None:
        scheme, _, value = (headers.get("authorization") or "").partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None


SESSION_HEADER = "mcp-session-id"
FOREIGN_SESSION = PlainTextResponse("404: session not found for this token (a session belongs to the token that "
                                    "opened it); start a new session with initialize\n", status_code=404)


class SessionGuard:
    """ASGI middleware behind ``BearerGuard``: an HTTP session (``Mcp-Session-Id``) is used with
    the token that opened it only, so a client that learned another's session id can neither read
    its stream nor answer its questions; another token's request gets the 404 a client meets for
    an expired session (it starts a new one). Owners idle past ``idle_s`` (the sessions' own
    idle time) are forgotten."""

    def __init__(self, app: ASGIApp, idle_s: float = SESSION_IDLE_S) -> None:
        self.app, self.idle_s = app, idle_s
        self.owners: dict[str, tuple[str, float]] = {}  # session id -> (token name, last seen, monotonic s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        name, now = scope["state"][STATE_TOKEN], time.monotonic()
        session = Headers(scope=scope).get(SESSION_HEADER)
        if session is not None:
            owner = self.owners.get(session)
            if owner is not None and owner[0] != name:
                await FOREIGN_SESSION(scope, receive, send)
                return
            if owner is not None:
                self.owners[session] = (name, now)
            await self.app(scope, receive, send)
            return

        async def recording(message: Message) -> None:  # a new session's id: bind it to this token
            if message["type"] == "http.response.start":
                opened = Headers(raw=message.get("headers") or []).get(SESSION_HEADER)
                if opened is not None:
                    self._bind(opened, name, now)
            await send(message)
        await self.app(scope, receive, recording)

    def _bind(self, session: str, name: str, now: float) -> None:
        if len(self.owners) % 256 == 255:
            self.owners = {k: v for k, v in self.owners.items() if now - v[1] < self.idle_s}
        self.owners[session] = (name, now)


def http_app(server: MCPServer, host: str, verify: Verifier, allowed_hosts: Iterable[str] = (),
             session_idle_s: float = SESSION_IDLE_S) -> ASGIApp:
    """The SDK's Streamable HTTP app at ``/mcp`` behind the Host, Origin and token checks (the
    SDK's own header check is off: ours is the one offload applies everywhere); a session with
    no request in flight (no call served, no open stream) for ``session_idle_s`` is ended by
    the SDK, and its id then answers 404."""
    hosts = HostCheck(host, allowed_hosts)
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host, session_idle_timeout=session_idle_s,
                                     transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return HostGuard(OriginGuard(BearerGuard(SessionGuard(app, session_idle_s), verify), hosts), hosts)


def serve_http(server: MCPServer, host: str, port: int, verify: Verifier, allowed_hosts: Iterable[str] = (),
               on_start: Callable[[str], None] | None = None, on_exit: Callable[[int], None] | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM (uvicorn's handling); ``on_start(url)`` once the port is
    bound (port 0 = any free port, so a caller learns which); ``on_exit(signum)`` as the signal
    arrives, so long polls end at once with their current state instead of holding the
    shutdown (uvicorn waits for in-flight requests, at most ``SHUTDOWN_GRACE_S``)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
            if on_exit is not None:
                on_exit(sig)
            super().handle_exit(sig, frame)

    app = http_app(server, host, verify, allowed_hosts)
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
