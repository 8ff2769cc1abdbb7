"""Where offload keeps its data: ``$HERMES_HOME`` (default ``~/.hermes``).

Resolved at call time from the environment, because one process may serve several homes
(tests, profiles) and the ledger must always write to the home of the caller. Only the
string-to-``Path`` work is remembered (for the last environment seen): the ledger asks for
these paths on every dispatch.
"""
from __future__ import annotations

import os
from pathlib import Path

_last: tuple[tuple[str, str | None], tuple[Path, Path, Path]] | None = None


def _paths() -> tuple[Path, Path, Path]:
    """(home, state.db, config.yaml) for the environment as it is now."""
    global _last
    raw = os.environ.get("HERMES_HOME", "").strip()
    # ``~`` and the default home depend on $HOME too; an absolute home does not.
    key = (raw, None if raw and not raw.startswith("~") else os.environ.get("HOME"))
    last = _last
    if last is not None and last[0] == key:
        return last[1]
    home = Path(raw).expanduser() if raw else Path.home() / ".hermes"
    paths = (home, home / "state.db", home / "config.yaml")
    _last = (key, paths)
    return paths


def get_hermes_home() -> Path:
    return _paths()[0]


def state_db_path() -> Path:
    return _paths()[1]


def config_path() -> Path:
    return _paths()[2]
