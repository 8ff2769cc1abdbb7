"""Dashboard tests: a runtime of their own (the ``runtime`` fixture), a way to hold units
running on it until the test lets them finish, the dashboard over it served on loopback in
this process, and headless Chromium."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from offload.engine.units import batch_spec
from offload.origin import Origin
from offload.runtime import Offload
from tests.engine.conftest import wait_event

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
LOOPBACK = "http://127.0.0.1"  # the dashboard answers only to the names it serves, not "testserver"
INSTALL_HINT = "apt-get install chromium chromium-driver (what .ci/services.d/30-chromium.sh does)"


@dataclass
class HeldUnit:
    """A fan-out unit whose children finish when the test says so (or when interrupted)."""

    runtime: Offload
    goals: list[str]
    summaries: list[str]
    release: threading.Event = field(default_factory=threading.Event)
    interrupted: threading.Event = field(default_factory=threading.Event)
    delegation_id: str = ""
    said: list[list[tuple[float, dict[str, Any]]]] = field(default_factory=list)  # per child: its transcript

    def say(self, child: int, message: dict[str, Any]) -> None:
        """Child ``child`` adds ``message`` to its conversation (read by the journal)."""
        self.said[child].append((time.time(), message))

    def transcript(self) -> list[tuple[int, list[tuple[float, dict[str, Any]]]]]:
        return [(i, list(messages)) for i, messages in enumerate(self.said)]

    def runner(self) -> dict[str, Any]:
        self.release.wait(30)
        status = "interrupted" if self.interrupted.is_set() else "completed"
        return {"results": [{"task_index": i, "status": status, "summary": s, "api_calls": 2}
                            for i, s in enumerate(self.summaries)]}

    def interrupt(self) -> None:
        self.interrupted.set()
        self.release.set()

    def progress(self) -> tuple[list[tuple[int, str | None, float]], bool]:
        return [(3, "terminal", time.time()) for _ in self.goals], True

    def dispatch(self, session_key: str = "sess-1") -> "HeldUnit":
        self.said = [[] for _ in self.goals]
        handle = self.runtime.engine.dispatch(batch_spec(self.goals, model="fake", origin=Origin.capture(session_key)),
                                              self.runner, 10, interrupt_fn=self.interrupt, progress_fn=self.progress,
                                              transcript_fn=self.transcript)
        assert handle["status"] == "dispatched", handle
        self.delegation_id = handle["delegation_id"]
        return self

    def finish(self) -> dict[str, Any]:
        self.release.set()
        return wait_event(self.delegation_id, bus=self.runtime.bus)


@pytest.fixture
def held(runtime):
    units: list[HeldUnit] = []

    def make(goals: list[str], summaries: list[str] | None = None) -> HeldUnit:
        unit = HeldUnit(runtime, goals, summaries or [f"done: {g}" for g in goals])
        units.append(unit)
        return unit.dispatch()

    yield make
    for unit in units:
        unit.release.set()


@pytest.fixture
def dashboard(runtime, request) -> Iterator[Any]:
    """``dashboard(token=None, signed_in=True)`` -> a started DashboardServer over ``runtime`` on
    127.0.0.1 (the home's token by default), stopped at teardown. When the test uses ``browser``
    too, the browser signs in as a person does: it opens the address with the token once."""
    from offload.dashboard.server import DashboardServer

    servers = []

    def start(token: str | None = None, signed_in: bool = True) -> DashboardServer:
        server = DashboardServer(runtime, "127.0.0.1", 0, token, refresh_s=0.1).start()
        servers.append(server)
        if signed_in and "browser" in request.fixturenames:
            sign_in(request.getfixturevalue("browser"), server.login_url)
        return server

    yield start
    for server in servers:
        server.stop()


def sign_in(browser: Any, login_url: str) -> None:
    """Open the address with the token once, as the person does; the dashboard keeps a cookie
    and drops the token from the address bar."""
    browser.get(login_url)
    assert "token=" not in browser.current_url and "401" not in browser.title, browser.current_url


def signed_in(app: Any, base_url: str = LOOPBACK) -> Any:
    """A Starlette TestClient of the dashboard ``app`` that shows its token (Authorization:
    Bearer) and is its own page (Origin), as the dashboard's buttons are."""
    from starlette.testclient import TestClient

    return TestClient(app, base_url=base_url, headers={"Authorization": f"Bearer {app.state.token()}",
                                                         "Origin": base_url})


@dataclass
class Served:
    """An ``offload dashboard`` subprocess: where it listens, and the token it printed."""

    url: str
    token: str

    @property
    def login_url(self) -> str:
        return f"{self.url}/?token={self.token}"

    @property
    def headers(self) -> dict[str, str]:
        """What a script sends: the token, and the dashboard's own Origin (needed by actions)."""
        return {"Authorization": f"Bearer {self.token}", "Origin": self.url}

    def get(self, path: str, **kwargs: Any) -> Any:
        import httpx

        return httpx.get(self.url + path, headers={**self.headers, **kwargs.pop("headers", {})}, **kwargs)


def read_banner(lines: Iterator[str]) -> Served:
    """The two lines ``offload dashboard`` prints at start: its address, then the one with the token."""
    first, second = next(lines), next(lines)
    assert " on http://" in first and "?token=" in second, (first, second)
    url = first.split(" on ", 1)[1].split("/ ", 1)[0]
    return Served(url, second.split("?token=", 1)[1].split()[0])


def serve_cli_dashboard(*args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``offload dashboard --port 0 ARGS`` as a subprocess: yields it once it listens, stops it
    with SIGTERM."""
    server = subprocess.Popen([sys.executable, "-m", "offload", "dashboard", "--port", "0", *args], env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        yield read_banner(iter(server.stderr.readline, ""))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(15)


def _browser_missing() -> str | None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.exists(p) or shutil.which(os.path.basename(p)))]
    return f"{', '.join(missing)} not found; install them with: {INSTALL_HINT}" if missing else None


@pytest.fixture
def browser():
    """Headless Chromium driven by selenium. Missing: skip locally, fail in CI (CI=true)."""
    missing = _browser_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser tests: {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,800", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver_path = CHROMEDRIVER if os.path.exists(CHROMEDRIVER) else shutil.which("chromedriver")
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
