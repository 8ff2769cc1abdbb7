"""``offload run`` for scripts: the prompt from stdin, the turn and the wait for its background
results (``run_one``), and the closing line that says how it ended.

When stdin is read (the rule users rely on, also in docs/commands.md):
- ``offload run -``, or no prompt with stdin not a terminal (and not only collecting results
  with ``--resume``): stdin is the prompt, read to its end; empty is an error for ``-``;
- a prompt on the command line with stdin not a terminal: what stdin holds is put BEFORE the
  prompt (``git diff | offload run "review this"``), as ``llm`` does. It is read only if it is
  a file, or a pipe that has data or is closed when ``run`` looks; a pipe held open with
  nothing written (cron, CI, a parent that never closes it) is not waited for, and a writer
  that goes silent for ``PIPE_IDLE_S`` with the pipe still open ends the reading. Empty stdin
  adds nothing.
Invariant: with a prompt given, reading stdin never blocks on a silent writer.
"""
from __future__ import annotations

import os
import select
import stat
import sys
from typing import TYPE_CHECKING

from offload.errors import CliError
from offload.cli.exit_codes import ExitCode

if TYPE_CHECKING:
    from offload.session.driver import SessionDriver

_ENDED = {ExitCode.INTERRUPTED: "interrupted", ExitCode.ENDPOINT: "the model endpoint failed",
          ExitCode.MODEL: "the model does not exist", ExitCode.ERROR: "a turn failed",
          ExitCode.INCOMPLETE: "work was cut off (truncated)", ExitCode.SUBAGENTS_FAILED: "no subagent completed",
          ExitCode.STOPPED: "background work stopped early (stalled, or stopped by a user)"}


PIPE_IDLE_S = 0.5  # a pipe held open this long with nothing more written: take what came


def prompt_from_stdin(prompt: str | None, collecting: bool) -> str | None:
    """The prompt: stdin's text for ``-`` or a missing prompt (see the module docstring), else
    ``prompt`` with whatever stdin holds put before it."""
    stdin = sys.stdin
    piped = stdin is not None and not stdin.isatty()
    if prompt == "-" or (prompt is None and not collecting and piped):
        text = stdin.read().strip() if stdin is not None else ""
        if not text and prompt == "-":
            raise CliError("`offload run -` reads the prompt from stdin, but stdin was empty; "
                           "pipe it in: echo \"...\" | offload run -")
        return text or None
    if prompt is None or not piped:
        return prompt
    content = (_available(stdin) or "").strip()
    return f"{content}\n\n{prompt}" if content else prompt


def _available(stdin) -> str | None:
    """What stdin holds now, without waiting on a writer that keeps it open and silent."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return stdin.read()  # not an OS file (an embedding program's stream): read it as it is
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return stdin.read()
    chunks = []
    ready = select.select([fd], [], [], 0)[0]
    while ready:
        data = os.read(fd, 1 << 16)
        if not data:
            break  # end of file
        chunks.append(data)
        ready = select.select([fd], [], [], PIPE_IDLE_S)[0]
    return b"".join(chunks).decode(getattr(stdin, "encoding", None) or "utf-8", errors="replace")


def closing_line(code: ExitCode, session_id: str) -> str:
    """The last line (stderr): done, or how the run ended; either way how to continue the session."""
    if code == ExitCode.OK:
        return f"done; continue with: offload chat --resume {session_id}"
    return f"{_ENDED.get(code, 'failed')} (exit {int(code)}); the session is kept: offload chat --resume {session_id}"


def run_one(driver: SessionDriver, prompt: str | None, sync: bool, as_json: bool) -> int:
    """One turn of ``prompt`` (none: only collect what the session awaits), then wait for its
    background results, each injected as a turn; the exit code the driver settled on."""
    ui = driver.ui
    ui.say(f"offload run — session {driver.session_id}", style="bold")
    driver.deliver_ready()  # results replayed for a resumed session come before the new prompt
    expected, dispatched = 0, []
    if prompt:
        ui.answer(prompt, label="you")
        turn = driver.user_turn(prompt)
        dispatched = [u.get("delegation_id") for h in turn.dispatched for u in (h.get("units") or [h])]
        expected = len(dispatched)
        if turn.ctrl_c and driver.live_count():  # one Ctrl-C ends a run, the work it started too
            ui.warn(f"stopping {driver.stop_background()} background delegation(s) this run started")
    if sync:
        ui.say("--sync: delegations ran synchronously inside the turn; nothing to wait for", style="yellow")
    expected = max(expected, driver.live_count())
    if expected:
        ui.say(f"waiting for {expected} background result(s)… (Ctrl-C stops them)", style="yellow")
    for unit in driver.units():
        if unit.get("where"):  # run by another process: say which, so a user can tell a missing worker
            ui.say(f"  {unit['delegation_id']}: {unit['where']}", style="dim")
    from offload.cli.progress import RosterView

    with RosterView(driver, transient=True) as view:  # live on a terminal; nothing extra on a pipe
        driver.wait_for_background(on_wait=view.refresh)
    usage = driver.usage_line()
    if usage:
        ui.say(usage, style="dim")
    ui.say(closing_line(driver.exit_code, driver.session_id), style="dim")
    if as_json:
        from offload.cli.ledger import emit_json, run_results

        emit_json(run_results(driver, dispatched))
    return int(driver.exit_code)
