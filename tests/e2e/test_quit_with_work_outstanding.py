"""Leaving ``offload chat`` with work outstanding (issue 26, item 3): after ``/quit`` no prompt is
shown, the FIRST Ctrl-C stops the subagents (it is not swallowed by a prompt still waiting for
input), and a second one leaves at once with exit code 130.

The chat runs on a pseudo-terminal that is its controlling terminal, so Ctrl-C typed there is
a real SIGINT whenever the line editor is not reading keys, as in a person's terminal."""
from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading

import pytest

from offload.ledger.reads import Browse
from offload.owner import home_worker
from offload.subagents.resume import handed_over
from offload.testing.demo_script import CRASH_PROMPT
from tests.e2e.conftest import cli_env
from tests.e2e.test_terminal import Terminal

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _own_terminal() -> None:
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # stdin (the pty) becomes the controlling terminal
    # SIGINT back to its default: a test run started in the background (`cmd &`) inherits it ignored.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class ControllingTerminal(Terminal):
    def __init__(self, *args: str) -> None:  # Terminal's, with the pty as controlling terminal
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen([sys.executable, "-m", "offload", *args], stdin=slave, stdout=slave,
                                     stderr=slave, preexec_fn=_own_terminal,
                                     env=cli_env(TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1"))
        os.close(slave)
        self.master = master
        self._raw = bytearray()
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()


def _quit_with_the_slow_task_running(sessions: int = 1) -> tuple[ControllingTerminal, int]:
    """``offload chat`` after ``sessions`` crash drills (``/new`` between them), told ``/quit``
    while the last one's slow task runs on."""
    term = ControllingTerminal("chat", "--demo-model")
    at = term.wait_for(r"you>")
    for n in range(sessions):
        if n:
            term.type("/new\r")
            at = term.wait_for(r"new session", at)
        term.type(CRASH_PROMPT + "\r")
        at = term.wait_for(r"delegated 2 task\(s\) in the background", at)
        at = term.wait_for(r"agent> I've started the subagents", at)  # the turn is over; the slow task runs on
    term.type("/quit\r")
    at = term.wait_for(r"waiting for 1 background result\(s\) before leaving; Ctrl-C stops them", at)
    return term, at


def _two_ctrl_cs(term: ControllingTerminal, at: int, leaving: str) -> int:
    """The first Ctrl-C stops the waited session's subagents, the second leaves: the exit code."""
    term.type("\x03")
    at = term.wait_for(r"stopping 1 background delegation\(s\)", at)
    term.type("\x03")
    term.wait_for(leaving, at)
    return term.close()


def test_the_first_ctrl_c_after_quit_stops_the_subagents():
    term, at = _quit_with_the_slow_task_running()
    try:
        term.type("\x03")
        at = term.wait_for(r"stopping 1 background delegation\(s\)", at)
        term.wait_for(r"session saved; resume it with", at)  # the stopped unit reported, then it left
        assert term.close() == 0
        assert "you>" not in term.screen[term.screen.index("waiting for 1 background result"):]
    finally:
        term.proc.kill()


def test_a_second_ctrl_c_leaves_at_once_with_130():
    term, at = _quit_with_the_slow_task_running()
    try:
        assert _two_ctrl_cs(term, at, r"leaving now: unfinished results stay in the ledger") == 130
    finally:
        term.proc.kill()


def test_a_second_ctrl_c_hands_over_what_the_first_did_not_stop(runtime, _isolated_hermes_home):
    """The first Ctrl-C stops the subagents of the session the chat waits for; the second leaves
    and hands over what still runs -- here the slow child of the session before ``/new`` (issue
    44: the second Ctrl-C hands work over)."""
    term, at = _quit_with_the_slow_task_running(sessions=2)
    try:
        assert _two_ctrl_cs(term, at, r"1 still running go on in this home's background worker") == 130
    finally:
        term.proc.kill()
    rows = runtime.ledger().browse(Browse(limit=10))
    handed = [row for row in rows if handed_over(row) or (row.result or {}).get("resumed")]
    assert len(rows) == 2 and len(handed) == 1, [(r.delegation_id, r.state, r.task) for r in rows]
    home_worker.kill(_isolated_hermes_home)  # the background worker it started
