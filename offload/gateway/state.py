"""The gateway's small durable state in ``$HERMES_HOME/gateway/``.

``<platform>-state.json`` holds the update offset, each chat's current session id (by session
key) and the chats already refused. (Why a result was dropped is a ledger column, so every host
can show it.) Invariant: every change is a read-modify-write under an
exclusive ``flock`` and lands by atomic rename, so two gateway processes on one home never lose
each other's writes and a crash never leaves half a file. A corrupt state file is an error that
names the file and the fix, never silently reset (that would replay or skip updates).
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from offload.home import get_hermes_home as hermes_home


class GatewayStateError(Exception):
    pass


def gateway_dir() -> Path:
    path = hermes_home() / "gateway"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


class GatewayState:
    def __init__(self, platform: str, directory: Path | None = None) -> None:
        directory = directory or gateway_dir()
        self.path = directory / f"{platform}-state.json"
        self._lock_path = directory / f".{platform}-state.lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise GatewayStateError(f"{self.path} is not valid JSON ({exc}); fix it, or delete it to start over "
                                    "(chats then get new sessions and old updates may be fetched again)") from exc
        if not isinstance(data, dict):
            raise GatewayStateError(f"{self.path} must hold a JSON object; delete it to start over")
        return data

    def read(self) -> dict[str, Any]:
        with self._locked():
            return self._read()

    def update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        """Apply ``change`` to the state under the lock and write it back; returns what it returned."""
        with self._locked():
            data = self._read()
            out = change(data)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".state-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            return out
