"""``offload chat``: the REPL.

ONE loop owns the agent. A reader thread turns stdin into lines on a queue; the loop takes a
line, or — when none arrives within ``POLL_S`` and no turn is running — polls the session's
inbox and injects each landed background result as a new turn. So a result is never spliced
into a running turn, and results appear while the user is idle.

Slash commands: ``/agents`` (live roster) and ``/stop`` (interrupt this session's background
subagents) are answered by the reader thread at once, even while a turn runs — both only read
or signal the engine, which is thread-safe; ``/quit`` (or end of input) waits for this
session's background results, then leaves; ``/new`` starts a fresh session in the loop itself,
between turns and deliveries, and the previous session's results stay with it. Ctrl-C
interrupts a running turn; at the prompt it leaves like ``/quit``.
"""
from __future__ import annotations

import queue
import sys
import threading
from typing import IO

from offload.driver import POLL_S, SessionDriver
from offload.views import live_roster

HELP = ("commands: /agents (live roster of background subagents), /stop (interrupt them), "
        "/show ID (a result in full, as the agent read it), /new (start a new session), "
        "/quit (wait for their results, then leave), /help")
_EOF = None


class ChatLoop:
    def __init__(self, driver: SessionDriver, stdin: IO[str] | None = None) -> None:
        self.driver = driver
        self.ui = driver.ui
        self.stdin = stdin if stdin is not None else sys.stdin
        self._lines: queue.Queue[str | None] = queue.Queue()

    def run(self) -> int:
        self._banner()
        threading.Thread(target=self._read_input, name="offload-stdin", daemon=True).start()
        try:
            self._loop()
        except KeyboardInterrupt:
            self.ui.say("(leaving)", style="yellow")
        live = self.driver.live_count()
        if live:
            self.ui.say(f"waiting for {live} background result(s) before leaving; Ctrl-C stops them", style="yellow")
        self.driver.wait_for_background()
        self.ui.say(f"session saved; resume it with: offload chat --resume {self.driver.session_id}")
        return 0

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
                self.driver.deliver_ready()  # idle: only now may a result become a turn
                continue
            if line is _EOF or line == "/quit":
                return
            if line == "/new":  # here, between turns and deliveries: never inside either
                self.driver.new_session()
                continue
            self.driver.user_turn(line)

    def _read_input(self) -> None:
        try:
            for raw in iter(self.stdin.readline, ""):
                line = raw.strip()
                if line and not self._command(line):
                    self._lines.put(line)
        except (OSError, ValueError):
            pass  # stdin closed under us: same as end of input
        self._lines.put(_EOF)

    def _command(self, line: str) -> bool:
        """Answer a slash command that must not wait for the running turn; False if not one."""
        if line == "/agents":
            self.ui.show(live_roster(self.driver.units()))
        elif line == "/stop":
            stopped = self.driver.stop_background()
            self.ui.say(f"stopped {stopped} background delegation(s); their results will be reported here",
                        style="yellow")
        elif line.startswith("/show"):
            self._show(line.removeprefix("/show").strip())
        elif line in ("/help", "/?"):
            self.ui.say(HELP)
        elif line.startswith("/") and line not in ("/quit", "/new"):
            self.ui.error(f"unknown command {line.split()[0]}; {HELP}")
        else:
            return False
        return True

    def _show(self, wanted: str) -> None:
        from offload.cli_ledger import full_result
        from offload.ledger_view import LedgerView

        if not wanted:
            self.ui.error("usage: /show ID (the id in the result's header; a unique prefix is enough)")
            return
        try:
            self.ui.say(full_result(LedgerView(), wanted))
        except Exception as exc:  # CliError, or a ledger problem: said here, the chat goes on
            self.ui.error(str(exc))
