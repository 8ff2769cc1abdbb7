"""One line, the fix and exit code 2 for a ``$HERMES_HOME`` or ``state.db`` the user must repair.

``state.db`` holds two stores (sessions, and the delegation ledger) that fail in the same ways:
damaged, locked by another process, on a full disk, or not writable. Both are described here
by one rule, so the advice is the same whichever store hit the problem first. Invariant: a
lock is never called damage (nothing needs moving aside), and a damaged file is never
deleted for the user: the advice moves it aside, so its rows can still be rescued.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from offload.home import state_db_path

_FIX = {
    "corrupt": "{path} is damaged (not a readable SQLite database: {cause}); move it aside with "
               "`mv {q} {q}.corrupt` and offload starts a fresh one (sessions and undelivered results stay in "
               "the moved file)",
    "locked": "{path} is locked by another process for longer than offload waits; stop that process "
              "(e.g. an sqlite3 shell left in a transaction) and retry — the file is not damaged",
    "full": "the disk holding {path} is full ({cause}); free some space and retry",
    "unwritable": "cannot write {path} ({cause}); make {home} writable by this user, or point HERMES_HOME at a "
                  "writable directory",
}


def describe(exc: BaseException) -> str | None:
    """The one-line message for a storage failure, or None if ``exc`` is not one."""
    from offload.agent.session_store import SessionStoreError
    from offload.ledger import LedgerError
    from offload.ledger.sqlite_files import classify_error

    if isinstance(exc, LedgerError) and exc.kind == "too_new":
        return str(exc)  # names the store, both schema versions and the fix (upgrade offload)
    if isinstance(exc, LedgerError):
        if exc.kind == "config" or not _ledger_in_state_db():
            return str(exc)  # it names its server or setting: the state.db advice would send the user astray
        kind, cause = exc.kind, exc.__cause__ or exc
    elif isinstance(exc, SessionStoreError) and exc.__cause__ is not None:
        cause = exc.__cause__
        kind = classify_error(state_db_path(), cause).kind
    elif isinstance(exc, SessionStoreError):
        return str(exc)
    else:
        return None
    return message(kind, cause, state_db_path())


def _ledger_in_state_db() -> bool:
    """Whether the ledger is SQLite in state.db (not PostgreSQL on ``ledger.url``)."""
    from offload.config import ConfigError
    from offload.ledger.select import ledger_settings

    try:
        return not ledger_settings().url
    except ConfigError:
        return False


def message(kind: str, cause: BaseException, path: Path) -> str:
    template = _FIX.get(kind)
    if template is None:
        return f"{path} cannot be used ({type(cause).__name__}: {cause}); check the file and {path.parent}"
    return template.format(path=path, q=shlex.quote(str(path)), home=path.parent, cause=cause)
