"""The ``ledger:`` section of ``$HERMES_HOME/config.yaml``: where the delegation ledger lives.

Unset ``ledger.url`` (the default) keeps the ledger in ``$HERMES_HOME/state.db`` (SQLite, no
server). ``ledger.url: postgresql://USER:PASSWORD@HOST:PORT/DATABASE`` -- or the environment
variable ``OFFLOAD_LEDGER_URL``, which wins over the file -- puts it in PostgreSQL, shared by
every process on every host that points at the same database. A bad value is a
``ConfigError`` naming the key and the fix; it never falls back to SQLite silently.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from offload.errors import ConfigError
from offload.home import config_path, read_config_file

LEDGER_URL_ENV = "OFFLOAD_LEDGER_URL"
HOST_ID_ENV = "OFFLOAD_HOST_ID"


class LedgerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, description="postgresql://USER:PASSWORD@HOST:PORT/DATABASE; unset: SQLite "
                                              "in $HERMES_HOME/state.db")
    host_id: str | None = Field(None, description="this host's name in owner leases; default: the hostname "
                                                  "(or OFFLOAD_HOST_ID)")
    lease_seconds: float = Field(60.0, gt=0, le=86_400, description="an owner silent this long is recovered "
                                                                    "by another host")
    heartbeat_seconds: float = Field(10.0, gt=0, description="how often an owner renews its lease")

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a PostgreSQL URL such as postgresql://offload:SECRET@db.example:5432/offload "
                             "(or unset for SQLite)")
        return value.strip()

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> "LedgerConfig":
        if self.heartbeat_seconds * 2 > self.lease_seconds:
            raise ValueError(f"ledger.heartbeat_seconds ({self.heartbeat_seconds:g}) must be at most half of "
                             f"ledger.lease_seconds ({self.lease_seconds:g}), or a live owner loses its lease")
        return self


def load_ledger_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> LedgerConfig:
    """The ``ledger:`` section over the defaults, then ``OFFLOAD_LEDGER_URL``/``OFFLOAD_HOST_ID``."""
    path = path or config_path()
    # A home that is not a directory has no config file; the ledger's own error names the fix.
    section: Any = (read_config_file(path) if path.parent.is_dir() else {}).get("ledger") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: `ledger` must be a mapping of keys, got {type(section).__name__}")
    return _with_env(section, env, str(path))


def with_env(settings: LedgerConfig, env: Mapping[str, str] | None = None) -> LedgerConfig:
    """``settings`` (a validated config's ``ledger``) with the environment overrides applied."""
    return _with_env(settings.model_dump(exclude_unset=True), env, "the ledger settings")


def _with_env(section: dict[str, Any], env: Mapping[str, str] | None, where: str) -> LedgerConfig:
    env = os.environ if env is None else env
    overrides = {key: env[name].strip() for key, name in (("url", LEDGER_URL_ENV), ("host_id", HOST_ID_ENV))
                 if env.get(name, "").strip()}
    try:
        return LedgerConfig.model_validate({**section, **overrides})
    except ValidationError as exc:
        where = f"{where} or {LEDGER_URL_ENV}" if "url" in overrides else where
        problems = "; ".join(f"ledger.{'.'.join(str(p) for p in e['loc']) or '(section)'}: "
                             f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        raise ConfigError(f"{where}: {problems}. Fix it with `offload config set ledger.KEY VALUE`.") from exc
