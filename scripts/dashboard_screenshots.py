"""Screenshots of every dashboard page at 1280 px and 390 px, for docs/dashboard.md.

    .venv/bin/python scripts/dashboard_screenshots.py            # writes docs/img/dashboard-*.png
    .venv/bin/python scripts/dashboard_screenshots.py --serve    # the same scene, served until Ctrl-C

The scene is made of real runs on a temporary ``$HERMES_HOME``: the demo model's fan-out through
``offload run --demo-model``, twice in one session (completed, delivered), the crash drill SIGKILLed mid-fan-out and
recovered by ``offload inbox`` (``unknown``), and, in this process, a three-child fan-out still
running (its first child waiting for approval of a command), a unit the stall monitor gave up on
and one interrupted from the engine. Needs
chromium and chromedriver (``.ci/services.d/30-chromium.sh``); nothing leaves 127.0.0.1.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (1280, 390)


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "OPENAI_"))}
    env.update(HERMES_HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "offload", *args], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL, check=False)


def _crash_drill(home: Path) -> None:
    """``offload run`` SIGKILLed while its slow child runs; ``offload inbox`` recovers the unit."""
    from offload.testing.demo_script import CRASH_PROMPT

    env = {**os.environ, "HERMES_HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "offload", "run", "--demo-model", CRASH_PROMPT], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not json.loads(_cli("agents", "--json", home=home).stdout)["running"]:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(15)
    _cli("inbox", home=home)


class Held:
    """A unit of this process whose children report when released (or interrupted)."""

    def __init__(self, off: Any, goals: list[str], progress_frozen: bool = False) -> None:
        from offload.engine.units import batch_spec
        from offload.origin import Origin

        self.release, self.interrupted, self.started = threading.Event(), threading.Event(), threading.Event()
        self.goals, self.frozen, self.born = goals, progress_frozen, time.time()
        handle = off.engine.dispatch(batch_spec(goals, model="demo-model", origin=Origin.capture("sess-live")), self.runner, 10,
                                     interrupt_fn=self.interrupt, progress_fn=self.progress)
        self.delegation_id = handle["delegation_id"]

    def runner(self) -> dict[str, Any]:
        self.started.set()
        self.release.wait(3600)
        status = "interrupted" if self.interrupted.is_set() else "completed"
        return {"results": [{"task_index": i, "status": status, "summary": f"{status}: {g}", "api_calls": 3}
                            for i, g in enumerate(self.goals)]}

    def interrupt(self) -> None:
        self.interrupted.set()
        if not self.frozen:  # a frozen child ignores the interrupt too: the monitor gives up on it
            self.release.set()

    def progress(self) -> tuple[list[tuple[int, str | None, float]], bool]:
        stamp = self.born - 600 if self.frozen else time.time()
        return [(4, "terminal" if i == 0 else "web_search", stamp) for i, _ in enumerate(self.goals)], not self.frozen


def build_scene(off: Any, home: Path) -> dict[str, str]:
    """The runs the pages show; returns the ids worth a page of their own."""
    _cli("run", "--demo-model", "compare the formats", home=home)
    _cli("run", "--demo-model", "--resume", "last", "compare the formats", home=home)  # one session, two runs
    first = off.ledger().settled_rows(1)[0]  # a demo fan-out: three children, a real tool call
    finished, session = first.delegation_id, first.parent_session_id or first.origin_session
    _crash_drill(home)
    stalled = Held(off, ["Summarise the build log (the tool never answers)"], progress_frozen=True)
    stalled.started.wait(10)
    now = time.monotonic()
    off.engine.stalls.check(now)
    off.engine.stalls.check(now + off.policy.stall_idle_s + 1)  # quiet past the limit: interrupted
    off.engine.stalls.check(now + off.policy.stall_idle_s + off.policy.stall_grace_s + 2)  # grace over: stalled
    stopped = Held(off, ["Crawl the changelog of every dependency"])
    off.engine.interrupt_one(stopped.delegation_id, reason="dashboard")
    running = Held(off, ["Count the files in src and group them by extension",
                         "Summarise README.md in five bullet points",
                         "List every TODO with its file and line"])
    now = time.time()  # its first child asks to run a destructive command (delegation.approvals: ask)
    off.ledger().add_approval({"request_id": "apr_3f9c2a71d0", "delegation_id": running.delegation_id,
                               "session_key": "sess-live", "child": 0, "command": "rm -rf build/ && make -j4",
                               "categories": ["destructive"], "reasons": ["removes folders recursively (rm -r build/)"],
                               "requested_at": now, "expires_at": now + 300, "owner": f"{os.getpid()}@localhost"})
    return {"running": running.delegation_id, "stalled": stalled.delegation_id, "stopped": stopped.delegation_id,
            "finished": finished, "session": session}


def shoot(url: str, login_url: str, pages: dict[str, str], out: Path) -> list[Path]:
    """Screenshots of ``pages`` at every width, signed in once with ``login_url`` (the address
    with the token the dashboard prints: it leaves a cookie, as for a person)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    written = []
    try:
        driver.get(login_url)
        for width in WIDTHS:
            for name, path in pages.items():
                driver.set_window_size(width, 900)
                driver.get(url + path)
                time.sleep(1.5)  # the live stream's first update
                height = driver.execute_script("return document.documentElement.scrollHeight")
                driver.set_window_size(width, min(max(height + 140, 600), 2600))
                target = out / f"dashboard-{name}-{width}.png"
                driver.save_screenshot(str(target))
                written.append(target)
    finally:
        driver.quit()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--serve", action="store_true", help="serve the scene until Ctrl-C instead")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="offload-shots-"))
    os.environ["HERMES_HOME"] = str(home)
    from offload.dashboard.server import DashboardServer
    from offload.runtime import Offload

    with Offload(home=home) as off:
        ids = build_scene(off, home)
        server = DashboardServer(off, "127.0.0.1", 0, refresh_s=0.5)
        if args.serve:
            server.serve_until_stopped(lambda s: print(f"serving {s.url}: open {s.login_url} (HERMES_HOME={home})",
                                                       flush=True))
            return 0
        server.start()
        try:
            pages = {"overview": "/", "history": "/history", "delegation": f"/d/{ids['finished']}",
                     "running": f"/d/{ids['running']}", "stalled": f"/d/{ids['stalled']}",
                     "session": f"/s/{ids['session']}"}
            args.out.mkdir(parents=True, exist_ok=True)
            for path in shoot(server.url, server.login_url, pages, args.out):
                print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
        finally:
            server.stop()
    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
