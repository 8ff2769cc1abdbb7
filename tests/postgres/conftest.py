"""Fixtures of the PostgreSQL tests: a fresh schema per test on the server ``.ci/postgres-up``
starts (skipped locally without it, naming that command; a failure under ``CI=true``), and
"hosts": owner processes with their own host id and a short lease."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.postgres_support import FreshSchema

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 3.0
HEARTBEAT_S = 0.5


@pytest.fixture
def pg_schema() -> Iterator[FreshSchema]:
    schema = FreshSchema()
    yield schema
    from tools import async_delegation_delivery as delivery

    delivery.reset_for_tests()  # close this process's pools before the schema goes
    schema.drop()


def host_home(base: Path, host_id: str, config: dict | None = None) -> Path:
    """A ``$HERMES_HOME`` for one simulated host, with the tests' short lease."""
    home = base / host_id
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump(
        {**(config or {}), "ledger": {"lease_seconds": LEASE_S, "heartbeat_seconds": HEARTBEAT_S}}))
    return home


class Host:
    """A process acting as one host with its own host id: ``tests/postgres/<script> ARGS``, or
    any ``argv`` (e.g. ``offload worker``)."""

    def __init__(self, base: Path, host_id: str, url: str, script: str, *args: str, argv: list[str] | None = None,
                 config: dict | None = None) -> None:
        self.host_id, self.home = host_id, host_home(base, host_id, config)
        self.lines: list[str] = []
        env = {**os.environ, "HERMES_HOME": str(self.home), "OFFLOAD_LEDGER_URL": url, "OFFLOAD_HOST_ID": host_id,
               "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        self.stderr = self.home / "stderr"
        argv = argv or [sys.executable, str(ROOT / "tests" / "postgres" / script), *args]
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=err, text=True)
        self._incoming: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"{host_id}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in iter(self.proc.stdout.readline, ""):
            self._incoming.put(line.rstrip("\n"))
        self._incoming.put(None)  # EOF: the process exited

    def wait_for(self, prefix: str, timeout_s: float = 60.0) -> str:
        """The first new line starting with ``prefix``; fails naming what the process printed
        if it exits or ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._incoming.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line, why = None, f"printed no {prefix!r} line within {timeout_s:g}s"
            else:
                why = f"exited ({self.proc.poll()}) before a {prefix!r} line"
            if line is None:
                raise AssertionError(f"{self.host_id} {why}; stdout {self.lines[-20:]}; "
                                     f"stderr {self.stderr.read_text()[-3000:]}")
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    def finish(self) -> list[str]:
        """Kill the process and return every line it printed."""
        self.stop()
        return self.lines

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        while True:
            try:
                line = self._incoming.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)


@pytest.fixture
def host_b(tmp_path, monkeypatch, pg_schema):
    """This test process, acting as host B on the same ledger, with a fresh engine; the results
    of its units are drained at the end, so no later test takes them for its own."""
    from tests.engine.conftest import drain_queue
    from tools import async_delegation as ad
    from tools import async_delegation_delivery as delivery

    monkeypatch.setenv("HERMES_HOME", str(host_home(tmp_path, "host-b")))
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", pg_schema.url)
    monkeypatch.setenv("OFFLOAD_HOST_ID", "host-b")
    ad._reset_for_tests()
    yield delivery.current_ledger()
    ad._reset_for_tests()
    drain_queue()


@pytest.fixture
def hosts(tmp_path) -> Iterator[list[Host]]:
    """Collects the hosts a test starts and kills what is left of them at teardown."""
    started: list[Host] = []
    yield started
    for host in started:
        host.stop()


@pytest.fixture
def pg_server(pg_schema):
    """Control of the test server (stop/start), or a skip saying why this run has none. The
    server is started again at teardown whatever the test did."""
    from tests.postgres.server_control import ServerControl

    control = ServerControl(pg_schema.dsn)
    why = control.why_not()
    if why:
        pytest.skip(why)
    yield control
    control.start()
