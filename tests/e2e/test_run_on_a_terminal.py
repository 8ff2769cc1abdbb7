"""What ``offload run`` leaves on a real terminal (issue 41, point 4): stdout and stderr on one
pty, its bytes played into a terminal emulator (pyte). A Ctrl-C that stops the background work
must not let the live roster's redraw or its clearing write over the agent's answer."""
from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time

import pyte
import pytest

from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import cli_env, scripted_parent

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
COLUMNS, LINES = 160, 60


def test_ctrl_c_in_run_on_a_terminal_keeps_the_agents_answer_on_screen(model_server, write_config,
                                                                        _isolated_hermes_home):
    server = model_server(scripted_parent(child=lambda r: hang_reply("thinking…"), delegate={"goal": "count the stars"},
                                          on_result=text_reply("Stopped as you asked; nothing was counted.")))
    write_config(server)
    leader, follower = pty.openpty()
    os.set_blocking(leader, False)
    env = cli_env(HERMES_HOME=str(_isolated_hermes_home), COLUMNS=str(COLUMNS), LINES=str(LINES), TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "offload", "run", "go"], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(follower)
    screen = pyte.Screen(COLUMNS, LINES)
    stream = pyte.ByteStream(screen)
    seen = b""

    def pump(until: bytes | None, timeout_s: float = 60.0) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (until is None or until not in seen):
            if not select.select([leader], [], [], 0.2)[0]:
                if until is None and proc.poll() is not None:
                    return
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the pty
                return
            seen += chunk
            stream.feed(chunk)
        assert until is None or until in seen, seen.decode(errors="replace")[-3000:]

    try:
        pump(b"waiting for 1 background result")
        assert server.wait_for_requests(3, timeout_s=30)  # the child is at work (and hangs)
        # the live roster is drawn and redrawn: the wait loop, which handles the Ctrl-C, runs
        deadline = time.monotonic() + 30
        while seen.count(b"background delegations (1)") < 3 and time.monotonic() < deadline:
            pump(b"background delegations (1)", timeout_s=5)
            pump(None, timeout_s=0.3)
        proc.send_signal(signal.SIGINT)
        pump(None)
        code = proc.wait(timeout=30)
        pump(None, timeout_s=2)
        assert code == 130, seen.decode(errors="replace")[-3000:]
    finally:
        proc.kill()
        os.close(leader)
    assert b"Stopped as you asked" in seen, "\n".join(screen.display).rstrip()  # it was written...
    shown = "\n".join(screen.display)
    assert "agent> Stopped as you asked; nothing was counted." in shown, shown  # ...and is still on screen
