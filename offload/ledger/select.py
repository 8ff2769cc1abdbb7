"""Which ledger this process uses: ``open_selected_ledger()`` reads the ``ledger:`` settings
and opens (through ``offload.ledger.open_ledger``) the SQLite ledger on
``$HERMES_HOME/state.db`` or the PostgreSQL ledger on ``ledger.url``. The settings are re-read
only when the config file or the environment changes, so calling this on every dispatch costs
one ``stat``.

A ``ledger:`` section that cannot be used yields ``MisconfiguredLedger``: every write raises
the config error (logged once by the engine, results delivered in memory), reads find
nothing. It never falls back to SQLite silently.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from typing import Callable

from offload.errors import ConfigError
from offload.home import config_path
from offload.ledger import DelegationLedger, LedgerError, open_ledger
from offload.ledger.config import HOST_ID_ENV, LEDGER_URL_ENV, LedgerConfig, load_ledger_config

Owner = Callable[[], "tuple[int, int | None]"]  # this process's (pid, start-time fingerprint)

_settings_cache: dict[tuple[Any, ...], LedgerConfig | ConfigError] = {}


class MisconfiguredLedger:
    """Stands in for the ledger while the ``ledger:`` settings are invalid."""

    def __init__(self, error: ConfigError) -> None:
        self.location = "ledger settings"
        self.error = LedgerError(str(error).rstrip("."), kind="config")

    def exists(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise self.error
        return fail


def ledger_settings() -> LedgerConfig:
    """The effective ``ledger:`` settings; ``ConfigError`` if they are invalid."""
    path = config_path()
    try:
        mtime_ns: int | None = path.stat().st_mtime_ns
    except OSError:
        mtime_ns = None
    key = (str(path), mtime_ns, os.environ.get(LEDGER_URL_ENV, ""), os.environ.get(HOST_ID_ENV, ""))
    cached = _settings_cache.get(key)
    if cached is None:
        try:
            cached = load_ledger_config(path)
        except ConfigError as exc:
            cached = exc
        _settings_cache.clear()
        _settings_cache[key] = cached
    if isinstance(cached, ConfigError):
        raise cached
    return cached


def ledger_key(state_db: Path) -> str:
    """What identifies the ledger this process should use now (a URL or the SQLite file)."""
    try:
        return ledger_settings().url or str(state_db)
    except ConfigError as exc:
        return f"misconfigured:{exc}"


def open_selected_ledger(state_db: Path, owner: Owner | None = None) -> DelegationLedger | MisconfiguredLedger:
    """A new ledger instance for the current settings: ``ledger.url``, else ``state_db``."""
    try:
        settings = ledger_settings()
    except ConfigError as exc:
        return MisconfiguredLedger(exc)
    return open_configured_ledger(state_db, settings, owner)


def open_configured_ledger(state_db: Path, settings: LedgerConfig, owner: Owner | None = None,
                           clock: Any = None) -> DelegationLedger | MisconfiguredLedger:
    """A new ledger instance for ``settings``: ``settings.url``, else the SQLite file ``state_db``.
    ``owner``: stamped on a shared ledger's leases and claims (default: the pid alone);
    ``clock``: what drives a shared ledger's loops (default: real time)."""
    if not settings.url:
        return open_ledger(state_db)
    try:
        return open_ledger(settings.url, host_id=settings.host_id, lease_s=settings.lease_seconds,
                           heartbeat_s=settings.heartbeat_seconds, owner=owner, clock=clock)
    except LedgerError as exc:
        return MisconfiguredLedger(ConfigError(str(exc)))
