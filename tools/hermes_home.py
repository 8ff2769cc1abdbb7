"""Where offload keeps its data: ``$HERMES_HOME`` (default ``~/.hermes``).

Resolved at call time, never cached, because one process may serve several homes
(tests, profiles) and the ledger must always write to the home of the caller.
"""
from __future__ import annotations

import os
from pathlib import Path


def get_hermes_home() -> Path:
    raw = os.environ.get("HERMES_HOME", "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".hermes"


def state_db_path() -> Path:
    return get_hermes_home() / "state.db"


def config_path() -> Path:
    return get_hermes_home() / "config.yaml"
