"""``offload chat``: the REPL.

ONE loop owns the agent. A reader thread turns stdin into lines on a queue (on a terminal
through a line editor with history, up/down and Ctrl-R search; see ``chat_input``); the loop takes a
line, or — when none arrives within ``POLL_S`` and no turn is running — polls the session's
inbox and injects each landed background result as a new turn. So a result is never spliced
into a running turn, and results appear while the user is idle.

Slash commands: ``/agents`` (live roster) and ``/stop`` (interrupt this session's background
subagents) are answered by the reader thread at once, even while a turn runs — both only read
or signal the engine, which is thread-safe; ``/quit`` (or end of input) waits for this
session's background results, then leaves — with no prompt shown, so the first Ctrl-C stops
them and a second leaves at once (exit 130); ``/new`` starts a fresh session in the loop
itself, between turns and deliveries, and the previous session's results stay with it. Ctrl-C
interrupts a running turn; at the prompt it leaves like ``/quit``.
"""
from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from typing import IO, Iterator

from offload.cli.chat_input import CTRL_C, line_source
from offload.session.driver import POLL_S, SessionDriver
from offload.home import get_hermes_home
from offload.cli.views import session_roster

HELP = ("commands: /agents (live roster of background subagents), /stop (interrupt them), "
        "/show ID (a result in full, as the agent read it), /approve ID or /deny ID (a subagent's command "
        "waiting for your answer), /new (start a new session), "
        "/quit (wait for their results, then leave), /help")
_EOF = None
STOP_READING_S = 2.0  # the prompt goes down within one event-loop turn; this only bounds a stuck one
HISTORY_FILE = "chat_history"
REQUEST_POLL_S = 2.0  # how often an idle chat looks for its session's approval requests made elsewhere


class ChatLoop:
    def __init__(self, driver: SessionDriver, stdin: IO[str] | None = None) -> None:
        self.driver = driver
        self.ui = driver.ui
        self.source = line_source(stdin if stdin is not None else sys.stdin, get_hermes_home() / HISTORY_FILE)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._in_turn = threading.Event()
        self._asked: set[str] = set()  # approval requests already shown
        driver.runtime.set_approval_surface(on_request=self._show_request)  # this process's subagents
        self._next_poll_at = 0.0

    def run(self) -> int:
        """0, or 130 when a second Ctrl-C left before the outstanding results were delivered."""
        self._banner()
        reader = threading.Thread(target=self._read_input, name="offload-stdin", daemon=True)
        reader.start()
        try:
            with self.source.output():
                self._loop()
        except KeyboardInterrupt:
            self.ui.say("(leaving)", style="yellow")
        self._stop_reading(reader)  # no prompt while leaving: the first Ctrl-C must reach the wait below
        delivered = self.driver.wait_for_background(announce=self._announce_wait)
        self.ui.say(f"session saved; resume it with: offload chat --resume {self.driver.session_id}")
        return 0 if delivered else 130

    def _announce_wait(self, live: int) -> None:
        if live:
            self.ui.say(f"waiting for {live} background result(s) before leaving; Ctrl-C stops them", style="yellow")

    def _stop_reading(self, reader: threading.Thread) -> None:
        deadline = time.monotonic() + STOP_READING_S
        while reader.is_alive() and time.monotonic() < deadline and self.source.close():
            reader.join(0.05)

    def _banner(self) -> None:
        agent = self.driver.conversation.agent
        history = self.driver.conversation.history
        resumed = f", resumed with {len(history)} stored message(s)" if history else ""
        self.ui.say(f"offload chat — session {self.driver.session_id}{resumed}", style="bold")
        self.ui.say(f"model {agent.model} at {agent.base_url}; background results appear here as they land. {HELP}",
                    style="dim")

    def _loop(self) -> None:
        while True:
            try:
                line = self._lines.get(timeout=POLL_S)
            except queue.Empty:
                self._poll_requests()
                with self._turn():
                    self.driver.deliver_ready()  # idle: only now may a result become a turn
                continue
            if line is _EOF or line == "/quit":
                return
            if line == "/new":  # here, between turns and deliveries: never inside either
                self.driver.new_session()
                continue
            with self._turn():
                self.driver.user_turn(line)

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """Marks the time a turn may run: Ctrl-C at the prompt then interrupts it."""
        self._in_turn.set()
        try:
            yield
        finally:
            self._in_turn.clear()

    def _read_input(self) -> None:
        for raw in self.source.lines():
            if raw == CTRL_C:
                if not self._in_turn.is_set():
                    break  # Ctrl-C at an idle prompt leaves, like /quit
                self.driver.conversation.agent.interrupt("stopped by the user (Ctrl-C)")
                continue
            line = raw.strip()
            if line and not self._command(line):
                self._lines.put(line)
        self._lines.put(_EOF)

    def _command(self, line: str) -> bool:
        """Answer a slash command that must not wait for the running turn; False if not one."""
        if line == "/agents":
            self.ui.show(session_roster(self.driver.units(), *self.driver.ledger_units()))
        elif line == "/stop":
            stopped = self.driver.stop_background()
            self.ui.say(f"stopped {stopped} background delegation(s); their results will be reported here",
                        style="yellow")
        elif line.startswith(("/approve", "/deny")):
            self._answer(line)
        elif line.startswith("/show"):
            self._show(line.removeprefix("/show").strip())
        elif line in ("/help", "/?"):
            self.ui.say(HELP)
        elif line.startswith("/") and line not in ("/quit", "/new"):
            self.ui.error(f"unknown command {line.split()[0]}; {HELP}")
        else:
            return False
        return True

    def _show_request(self, row: dict) -> None:
        """A subagent's command waits for an answer: one line, said at once (on the child's thread)."""
        from offload.cli.approvals import request_line

        if row["request_id"] in self._asked:
            return
        self._asked.add(row["request_id"])
        self.ui.say(f"approval needed: {request_line(row, time.time())} -- /approve {row['request_id']} or "
                    f"/deny {row['request_id']}", style="yellow")

    def _poll_requests(self) -> None:
        """Requests of this session made by other processes (a unit another owner adopted), every
        ``REQUEST_POLL_S`` while idle."""
        from offload.subagents.approvals import pending

        if time.monotonic() < self._next_poll_at:
            return
        self._next_poll_at = time.monotonic() + REQUEST_POLL_S
        try:
            for row in pending(self.driver.runtime.ledger(), self.driver.session_id):
                self._show_request(row)
        except Exception:  # a ledger that cannot be read now is read at the next poll
            pass

    def _answer(self, line: str) -> None:
        import getpass

        from offload.subagents.approvals import ApprovalError, decide, find_pending

        command, _, wanted = line.partition(" ")
        if not wanted.strip():
            self.ui.error(f"usage: {command} ID (the id in the 'approval needed' line; a unique prefix is enough)")
            return
        ledger = self.driver.runtime.ledger()
        try:
            row = decide(ledger, find_pending(ledger, wanted.strip()), command == "/approve", f"chat:{getpass.getuser()}")
        except ApprovalError as exc:
            self.ui.error(str(exc))
            return
        self.ui.say(f"{row['request_id']}: {row['state']} by {row['decided_by']}", style="yellow")

    def _show(self, wanted: str) -> None:
        from offload.cli.ledger import full_result
        from offload.views.ledger import LedgerView

        if not wanted:
            self.ui.error("usage: /show ID (the id in the result's header; a unique prefix is enough)")
            return
        try:
            off = self.driver.runtime
            self.ui.say(full_result(off, LedgerView(off.ledger()), wanted))
        except Exception as exc:  # CliError, or a ledger problem: said here, the chat goes on
            self.ui.error(str(exc))
