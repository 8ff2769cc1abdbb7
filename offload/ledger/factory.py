"""``open_ledger(url)``: the one place that names a ledger backend.

A ledger is chosen by a URL (or a filesystem path, which means SQLite):

| url | backend |
|---|---|
| ``/path/state.db``, a ``Path``, ``sqlite:///abs/path``, ``sqlite:relative/path`` | ``SqliteLedger`` |
| ``memory://`` (private) or ``memory://NAME`` (shared by name in this process) | ``MemoryLedger`` |
| ``postgresql://USER:PASSWORD@HOST:PORT/DB`` (or ``postgres://``) | ``PostgresLedger`` (options: ``host_id``, ``lease_s``, ``heartbeat_s``, ``owner``) |

Adding a backend is one entry in ``_OPENERS``: a function of the parsed URL (and any keyword
options the caller passes through) that imports its module lazily, so a driver is needed
only by those who use it. An unknown scheme is a ``LedgerError`` naming the accepted ones.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable
from urllib.parse import SplitResult, urlsplit

from offload.ledger.protocol import DelegationLedger, LedgerError
from offload.ledger.redaction import redact


def _sqlite_file(path: Path) -> DelegationLedger:
    from offload.ledger.sqlite import SqliteLedger

    if not str(path).strip() or str(path) == ".":
        raise LedgerError("the ledger location is empty; give a path to a SQLite file or a ledger URL", kind="config")
    return SqliteLedger(path.expanduser())


def _open_sqlite(url: SplitResult, raw: str) -> DelegationLedger:
    # sqlite:///abs/path -> netloc "" and path "/abs/path"; sqlite:relative -> path "relative".
    path = raw.split(":", 1)[1]
    path = path[2:] if path.startswith("//") else path
    if not path:
        raise LedgerError(f"ledger URL {raw!r} names no file; write sqlite:///ABSOLUTE/PATH/state.db", kind="config")
    return _sqlite_file(Path(path))


def _open_memory(url: SplitResult, raw: str) -> DelegationLedger:
    from offload.ledger.memory import MemoryLedger, named_store

    return MemoryLedger(named_store(url.netloc + url.path))


def _open_postgres(url: SplitResult, raw: str, **options: Any) -> DelegationLedger:
    from offload.ledger.postgres.ledger import PostgresLedger  # psycopg only for those who use it

    return PostgresLedger(raw, **options)


_OPENERS: dict[str, Callable[..., DelegationLedger]] = {
    "sqlite": _open_sqlite,
    "memory": _open_memory,
    "postgresql": _open_postgres,
    "postgres": _open_postgres,
}


def open_ledger(url: str | os.PathLike[str], **options: Any) -> DelegationLedger:
    """A new ledger instance for ``url`` (see the module docstring for the forms).

    ``options`` go to the backend's opener unchanged (e.g. a lease length for a shared
    server); a backend that takes none refuses them with a ``TypeError``.
    """
    if isinstance(url, os.PathLike):
        return _sqlite_file(Path(url), **options)
    raw = str(url).strip()
    if "://" not in raw and not raw.startswith("sqlite:"):
        return _sqlite_file(Path(raw), **options)  # a bare path (also C:\\... on Windows)
    try:
        parsed = urlsplit(raw)
    except ValueError as exc:
        raise LedgerError(f"the ledger URL {redact(raw)!r} cannot be parsed ({exc}); check its host and port",
                          kind="config") from exc
    opener = _OPENERS.get(parsed.scheme.lower())
    if opener is None:
        accepted = ", ".join(f"{scheme}://" for scheme in sorted(_OPENERS))
        raise LedgerError(f"unknown ledger URL scheme {parsed.scheme!r} in {redact(raw)!r}; use one of {accepted} "
                          "or a path to a SQLite file", kind="config")
    return opener(parsed, raw, **options)
