"""The exit codes of the ``offload`` command, one per kind of failure a script must tell apart.

The README's exit-code table is this enum. Invariant: a code is chosen from what failed
(the agent's ``error_kind``, the exception type, an event's ``stop_reason``), never by
searching message text. Precedence (``SessionDriver``): 130 (Ctrl-C in this run) overrides
every other code; otherwise the first non-zero outcome of the run's turns and delivered
results decides.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any

from offload.engine.states import COMPLETED, INTERRUPTED, child_state, event_state, stop_reason
from offload.render.truncation import UNFINISHED_EXIT_REASONS


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # an unexpected failure (a bug): please report it
    USAGE = 2  # configuration, usage or storage (state.db, $HERMES_HOME) problem the user can fix
    ENDPOINT = 3  # the model endpoint could not be reached or failed (after retries), or refused the key
    MODEL = 4  # the endpoint says the configured model does not exist
    INCOMPLETE = 5  # an answer or a subagent's result stopped unfinished: cut off, or the iteration budget
    SUBAGENTS_FAILED = 6  # a background result came back in which no subagent completed
    STOPPED = 7  # a background unit stopped early: stalled (no progress), or stopped by a user elsewhere
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)


# The agent's ``error_kind`` for a failed turn -> exit code.
_BY_ERROR_KIND = {"model": ExitCode.MODEL, "endpoint": ExitCode.ENDPOINT}


def for_turn(exit_reason: str, error_kind: str | None) -> ExitCode:
    """The exit code a turn that ended with ``exit_reason`` stands for."""
    if exit_reason == "interrupted":
        return ExitCode.INTERRUPTED
    if exit_reason == "error":
        return _BY_ERROR_KIND.get(error_kind or "", ExitCode.ERROR)
    if exit_reason in UNFINISHED_EXIT_REASONS:
        return ExitCode.INCOMPLETE
    return ExitCode.OK


def for_event(event: dict[str, Any]) -> ExitCode:
    """``for_result`` of a delivered ``async_delegation`` event (a single-task unit carries its
    child's outcome at the top level); a unit that did not complete because it stopped early
    (its ``stop_reason``: a stall, or a user's stop) is 7 where its children's outcome alone
    would say 0 (a stop is not the children's failure, nor a success)."""
    results = event.get("results")
    children = [r for r in results if isinstance(r, dict)] if isinstance(results, list) and results else [event]
    code = for_result(children)
    if code == ExitCode.OK and stop_reason(event) and event_state(event) != COMPLETED:
        return ExitCode.STOPPED
    return code


def for_result(children: list[dict[str, Any]]) -> ExitCode:
    """The exit code a delivered background result stands for, from its children's entries.

    No child completed: every child's ``error_kind`` alike picks 4 (model) or 3 (endpoint),
    else 6. Some completed but one is truncated: 5. A stopped unit (interrupted) is not a
    failure of its children: the Ctrl-C that stopped it already set 130."""
    if not children:
        return ExitCode.OK
    done = [c for c in children if child_state(c.get("status")) == COMPLETED]
    if not done:
        if all(child_state(c.get("status")) == INTERRUPTED for c in children):
            return ExitCode.OK
        kinds = {c.get("error_kind") for c in children}
        return _BY_ERROR_KIND.get(kinds.pop(), ExitCode.SUBAGENTS_FAILED) if len(kinds) == 1 else ExitCode.SUBAGENTS_FAILED
    if any(c.get("truncated") or c.get("exit_reason") in UNFINISHED_EXIT_REASONS for c in done):
        return ExitCode.INCOMPLETE
    return ExitCode.OK
