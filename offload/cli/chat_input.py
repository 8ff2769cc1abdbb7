"""Where ``offload chat`` reads lines from: a line editor on a terminal, plain lines otherwise.

On a terminal, prompt_toolkit gives line editing, history across sessions (up/down arrows,
kept in ``$HERMES_HOME/chat_history``) and Ctrl-R reverse search, while output from other
threads (landed results, answers) is printed above the prompt. On a pipe (scripts, tests),
lines are read as they come. Both yield ``CTRL_C`` when the user presses Ctrl-C at the prompt
(the terminal is in raw mode there, so no SIGINT arrives): the chat decides what it means.
``close()`` takes the prompt down when the chat stops reading (leaving with work outstanding),
so the next Ctrl-C is a signal again.

Invariant: a history file that cannot be written (read-only home) never breaks the chat.
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import IO, Iterator

logger = logging.getLogger(__name__)

CTRL_C = "\x03"
PROMPT = "you> "


class PlainLines:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def lines(self) -> Iterator[str]:
        try:
            yield from (raw.rstrip("\n") for raw in iter(self.stream.readline, ""))
        except (OSError, ValueError):
            return  # stdin closed under us: same as end of input

    def output(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def close(self) -> bool:
        """Nothing to take down: no prompt is shown, and Ctrl-C is a signal as usual."""
        return False


class PromptLines:
    """prompt_toolkit's line editor with a persistent history."""

    def __init__(self, history_path: Path) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory

        class _History(FileHistory):
            def __init__(self, filename: str) -> None:
                super().__init__(filename)
                # Read now, not lazily once the prompt runs: Up must work from the first key.
                self._loaded_strings = list(self.load_history_strings())
                self._loaded = True

            def store_string(self, string: str) -> None:
                try:
                    super().store_string(string)
                except OSError as exc:  # e.g. a read-only home: keep the history in memory only
                    logger.debug("chat history not saved: %s", exc)

        self.session: PromptSession[str] = PromptSession(history=_History(str(history_path)))
        self._closed = False

    def lines(self) -> Iterator[str]:
        while not self._closed:
            try:
                yield self.session.prompt(PROMPT)
            except KeyboardInterrupt:
                yield CTRL_C
            except EOFError:  # Ctrl-D, or close()
                return

    def close(self) -> bool:
        """Take the prompt down (from another thread): no new one is shown, and the one shown
        ends as if Ctrl-D was pressed, so the terminal leaves raw mode and Ctrl-C is a signal
        again. Call until the reading thread ends (a prompt may be starting meanwhile)."""
        self._closed = True
        app = self.session.app
        loop = app.loop
        if app.is_running and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: app.exit(exception=EOFError) if app.is_running else None)
        return True

    def output(self) -> contextlib.AbstractContextManager[None]:
        """While active, prints from any thread appear above the prompt instead of inside it."""
        from prompt_toolkit.patch_stdout import patch_stdout

        return patch_stdout(raw=True)


def line_source(stdin: IO[str], history_path: Path) -> PlainLines | PromptLines:
    import sys

    if stdin.isatty() and sys.stdout.isatty():
        return PromptLines(history_path)
    return PlainLines(stdin)
