"""Run the dashboard under uvicorn on a thread: ``offload dashboard`` serves until Ctrl-C or
SIGTERM; a process that runs delegations itself (tests, an embedding app) can ``start()`` it
beside its work, where the interrupt button reaches its units directly.

Invariant: every request must show the token (``offload.dashboard.security``; on loopback
too), and the server answers only to the Host names ``offload.access.http`` allows
(loopback names, the bound address, ``--allow-host`` names).
"""
from __future__ import annotations

import signal
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable
from urllib.parse import urlencode

import uvicorn

from offload.dashboard.app import create_app
from offload.access.http import HostCheck
from offload.errors import CliError

if TYPE_CHECKING:
    from offload.runtime import Offload

GRACEFUL_SHUTDOWN_S = 2.0


class DashboardServer:
    """One uvicorn server; ``start()`` returns once it listens, ``url`` says where."""

    def __init__(self, off: Offload, host: str = "127.0.0.1", port: int = 0,
                 token: str | Callable[[], str] | None = None, refresh_s: float = 1.0,
                 allowed_hosts: Iterable[str] = ()) -> None:
        """``token``: see ``create_app`` (default: ``$OFFLOAD_DASHBOARD_TOKEN``, else the home's
        operator token from its token store)."""
        self.app = create_app(off, token=token, refresh_s=refresh_s, hosts=HostCheck(host, allowed_hosts))
        config = uvicorn.Config(self.app, host=host, port=port, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
        self.server = uvicorn.Server(config)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        sock = self.server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    @property
    def login_url(self) -> str:
        """The address to open once in a browser: it carries the token, which becomes a cookie."""
        return f"{self.url}/?{urlencode({'token': self.app.state.token()})}"

    def serve_until_stopped(self, on_start=None) -> None:
        """Serve until Ctrl-C or SIGTERM; ``on_start(server)`` runs once it listens (port 0 resolved)."""
        previous = signal.signal(signal.SIGTERM, lambda *_: self.stop_soon())
        try:
            self.start()
            if on_start is not None:
                on_start(self)
            while self.thread.is_alive():
                self.thread.join(0.5)  # short joins: Ctrl-C reaches the main thread between them
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()
            signal.signal(signal.SIGTERM, previous)

    def stop_soon(self) -> None:
        self.app.state.dashboard.stopping.set()
        self.server.should_exit = True

    def start(self, timeout_s: float = 10.0) -> "DashboardServer":
        self.thread = threading.Thread(target=self.server.run, name="offload-dashboard", daemon=True)
        self.thread.start()
        if not _wait_started(self.server, self.thread, timeout_s):
            self.stop()
            config = self.server.config
            raise CliError(f"the dashboard could not listen on {config.host}:{config.port} (in use, or not an "
                           "address of this machine?); pick another with --port or --host")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self.stop_soon()
        if self.thread is not None:
            self.thread.join(timeout_s)


def _wait_started(server: uvicorn.Server, thread: threading.Thread, timeout_s: float) -> bool:
    # uvicorn offers no started event; ``started`` flips once the sockets listen.
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
