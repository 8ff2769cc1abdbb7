"""The exit codes of the ``offload`` command, one per kind of failure a script must tell apart.

The README's exit-code table is this enum. Invariant: a code is chosen from what failed
(the agent's ``error_kind``, the exception type), never by searching message text.
"""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # an unexpected failure (a bug): please report it
    USAGE = 2  # configuration, usage or storage (state.db, $HERMES_HOME) problem the user can fix
    ENDPOINT = 3  # the model endpoint could not be reached or failed (after retries), or refused the key
    MODEL = 4  # the endpoint says the configured model does not exist
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)


# The agent's ``error_kind`` for a failed turn -> exit code.
_BY_ERROR_KIND = {"model": ExitCode.MODEL, "endpoint": ExitCode.ENDPOINT}


def for_turn(exit_reason: str, error_kind: str | None) -> ExitCode:
    """The exit code a turn that ended with ``exit_reason`` stands for."""
    if exit_reason == "interrupted":
        return ExitCode.INTERRUPTED
    if exit_reason == "error":
        return _BY_ERROR_KIND.get(error_kind or "", ExitCode.ERROR)
    return ExitCode.OK
