"""``offload chat`` and ``offload run`` in a pseudo-terminal, as a person uses them: the line
editor's history (up arrow, Ctrl-R search, kept across sessions) and the live roster while
``run`` waits."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from offload.testing.model_server import last_message_text, text_reply
from tests.e2e.conftest import DEADLINE_S, cli_env, scripted_parent
from offload.home import get_hermes_home

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]|\r")


class Terminal:
    """``python -m offload ARGS`` on a pty of 120x40; ``screen`` is everything it wrote, ANSI removed."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen([sys.executable, "-m", "offload", *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=cli_env(TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1"), start_new_session=True)
        os.close(slave)
        self.master = master
        self._raw = bytearray()
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._changed.notify_all()
                    return
                self._raw += data
                self._changed.notify_all()

    @property
    def screen(self) -> str:
        with self._changed:
            return _ANSI.sub("", self._raw.decode("utf-8", "replace"))

    def wait_for(self, pattern: str, start: int = 0) -> int:
        """The end offset of the first match at or after ``start`` in ``screen``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + DEADLINE_S
        with self._changed:
            while True:
                match = regex.search(_ANSI.sub("", self._raw.decode("utf-8", "replace")), start)
                if match:
                    return match.end()
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.proc.poll() is not None:
                    break
                self._changed.wait(min(remaining, 0.5))
        pytest.fail(f"no {pattern!r} on the terminal within {DEADLINE_S} s; it shows:\n{self.screen}")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=DEADLINE_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.close(self.master)


UP, CTRL_R, ENTER, BACKSPACE = "\x1b[A", "\x12", "\r", "\x7f"


def editor_ready(term: Terminal) -> int:
    """Wait until the line editor echoes a key (so it reads keys and has loaded its history)."""
    at = term.wait_for(r"you>")
    term.type("x")
    at = term.wait_for(r"you> ?x", at - len("you>"))
    term.type(BACKSPACE)
    return at


def answered(term: Terminal, text: str, at: int) -> int:
    """Wait for the answer ``text``, then for the prompt drawn again below it: only then is the
    line editor reading keys (between two prompts the terminal is not in raw mode)."""
    return term.wait_for(r"you>", term.wait_for(re.escape(text), at))


def user_messages(server) -> list[str]:
    return [last_message_text(r) for r in server.requests if r["messages"][-1]["role"] == "user"]


def test_chat_history_recalls_earlier_lines_with_the_up_arrow_and_ctrl_r(model_server, write_config):
    server = model_server(lambda request: text_reply(f"echo: {last_message_text(request)}"))
    write_config(server)
    term = Terminal("chat")
    try:
        at = editor_ready(term)
        term.type("alpha one" + ENTER)
        at = answered(term, "echo: alpha one", at)
        term.type("beta two" + ENTER)
        at = answered(term, "echo: beta two", at)
        term.type(UP + UP + ENTER)  # two lines back
        at = answered(term, "echo: alpha one", at)
        term.type(CTRL_R + "bet")  # reverse search
        at = term.wait_for(r"reverse-i-search", at)
        term.type(ENTER + ENTER)  # accept the match, then send it
        at = answered(term, "echo: beta two", at)
        assert user_messages(server) == ["alpha one", "beta two", "alpha one", "beta two"]
        term.type("/quit" + ENTER)
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    saved = (get_hermes_home() / "chat_history").read_text(encoding="utf-8")
    assert "+alpha one" in saved and "+beta two" in saved  # kept for the next session

    again = Terminal("chat")
    try:
        at = editor_ready(again)
        again.type(UP + UP + ENTER)  # the line before the previous session's /quit
        again.wait_for(r"echo: beta two", at)
        again.type("/quit" + ENTER)
        assert again.close() == 0
    finally:
        if again.proc.poll() is None:
            again.proc.kill()


def test_run_shows_a_live_roster_of_the_children_while_it_waits(model_server, write_config):
    slow = text_reply("slow but done", chunk_chars=1, chunk_delay_s=0.15)  # ~2 s of streaming
    server = model_server(scripted_parent(child=lambda r: slow, delegate={"tasks": [{"goal": "alpha"},
                                                                                  {"goal": "beta"}]}))
    write_config(server)
    term = Terminal("run", "go")
    try:
        at = term.wait_for(r"waiting for 1 background result")
        at = term.wait_for(r"background delegations \(1\)", at)
        term.wait_for(r"#1  … running   api calls", at)
        term.wait_for(r"landed: Subagent Tasks Completed", at)
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
