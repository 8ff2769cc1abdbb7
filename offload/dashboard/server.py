"""Run the dashboard under uvicorn: in the foreground (``offload dashboard``) or on a
background thread of a process that runs delegations itself (tests, an embedding chat),
where its interrupt button reaches that process's units.

Invariant: the bind rule of ``security.check_bind`` is applied before anything listens.
"""
from __future__ import annotations

import threading
import time

import uvicorn

from offload.dashboard.app import create_app
from offload.dashboard.security import check_bind

GRACEFUL_SHUTDOWN_S = 2.0


class DashboardServer:
    """One uvicorn server; ``start()`` returns once it listens, ``url`` says where."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 refresh_s: float = 1.0) -> None:
        check_bind(host, token)
        self.app = create_app(token=token, refresh_s=refresh_s)
        config = uvicorn.Config(self.app, host=host, port=port, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
        self.server = _Server(config, self.app.state.dashboard.stopping)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        sock = self.server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    def run(self) -> None:
        """Serve in the foreground until Ctrl-C or SIGTERM."""
        try:
            self.server.run()
        finally:
            self.app.state.dashboard.stopping.set()

    def start(self, timeout_s: float = 10.0) -> "DashboardServer":
        self.thread = threading.Thread(target=self.server.run, name="offload-dashboard", daemon=True)
        self.thread.start()
        if not _wait_started(self.server, self.thread, timeout_s):
            raise RuntimeError(f"the dashboard did not start listening within {timeout_s} s")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self.app.state.dashboard.stopping.set()
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout_s)


class _Server(uvicorn.Server):
    """uvicorn's server that also ends the roster streams at Ctrl-C, instead of waiting them out."""

    def __init__(self, config: uvicorn.Config, stopping: threading.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    def handle_exit(self, sig, frame) -> None:
        self.stopping.set()
        super().handle_exit(sig, frame)


def _wait_started(server: uvicorn.Server, thread: threading.Thread, timeout_s: float) -> bool:
    # uvicorn offers no started event; ``started`` flips once the sockets listen.
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
