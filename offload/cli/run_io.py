"""``offload run`` for scripts: the prompt from stdin, and the closing line that says how it ended.

Invariant: stdin is read only when the user asked for it (``-``) or when no prompt was given on
the command line and stdin is a pipe or file; a resumed session that only collects results
never waits on stdin, which a calling program may hold open without writing to it.
"""
from __future__ import annotations

import sys

from offload.errors import CliError
from offload.exit_codes import ExitCode

_ENDED = {ExitCode.INTERRUPTED: "interrupted", ExitCode.ENDPOINT: "the model endpoint failed",
          ExitCode.MODEL: "the model does not exist", ExitCode.ERROR: "a turn failed",
          ExitCode.INCOMPLETE: "work was cut off (truncated)", ExitCode.SUBAGENTS_FAILED: "no subagent completed",
          ExitCode.STOPPED: "background work stopped early (stalled, or stopped by a user)"}


def prompt_from_stdin(prompt: str | None, collecting: bool) -> str | None:
    """The prompt: ``prompt`` itself, or stdin's text for ``-``, or for a missing prompt (when
    not only ``collecting`` results) with stdin not a terminal."""
    stdin = sys.stdin
    wanted = prompt == "-" or (prompt is None and not collecting and stdin is not None and not stdin.isatty())
    if not wanted:
        return prompt
    text = stdin.read().strip() if stdin is not None else ""
    if not text and prompt == "-":
        raise CliError("`offload run -` reads the prompt from stdin, but stdin was empty; "
                       "pipe it in: echo \"...\" | offload run -")
    return text or None


def closing_line(code: ExitCode, session_id: str) -> str:
    """The last line (stderr): done, or how the run ended; either way how to continue the session."""
    if code == ExitCode.OK:
        return f"done; continue with: offload chat --resume {session_id}"
    return f"{_ENDED.get(code, 'failed')} (exit {int(code)}); the session is kept: offload chat --resume {session_id}"
