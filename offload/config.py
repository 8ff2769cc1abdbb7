"""The whole ``$HERMES_HOME/config.yaml``, validated; ``offload config get/set``; the API key.

Owns ``OffloadConfig`` (top-level keys, with the ``delegation:`` section validated by the
engine's own ``DelegationConfig``), the ``OFFLOAD_*`` environment overrides, and dotted-key
reads and writes.

Invariants: a value is validated together with the whole file BEFORE anything is written, so
a bad ``set`` (unknown key, wrong type, out of range) is a ``ConfigError`` that names the key
and the fix and leaves the file byte-for-byte unchanged; the file is replaced atomically
(temp file in the same directory, fsync, rename, mode 0o600), so a crash never leaves half a
config. Errors never fall back to defaults silently.
"""
from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent.toolsets import KNOWN_TOOLSETS, validate_toolsets
from tools.delegate_config import ConfigError, DelegationConfig, read_config_file
from tools.hermes_home import config_path
from tools.ledger_config import LedgerConfig

__all__ = ["ConfigError", "OffloadConfig", "get_value", "load_config", "resolve_api_key", "set_value"]

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
ENV_OVERRIDES = {"model": "OFFLOAD_MODEL", "base_url": "OFFLOAD_BASE_URL"}
API_KEY_OVERRIDE_ENV = "OFFLOAD_API_KEY"
# Hosted endpoints that always need a key: fail before the first request, with the fix.
_HOSTS_NEEDING_A_KEY = ("api.openai.com", "openrouter.ai", "api.groq.com", "api.together.xyz", "api.mistral.ai",
                        "api.deepseek.com", "api.fireworks.ai")


class OffloadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(DEFAULT_MODEL, min_length=1, description="the parent agent's model id")
    base_url: str = Field(DEFAULT_BASE_URL, description="OpenAI-compatible API root, ending in /v1")
    api_key_env: str = Field("OPENAI_API_KEY", min_length=1, description="environment variable holding the API key")
    workspace: str | None = Field(None, description="directory the tools work in; default: where offload starts")
    max_iterations: int = Field(50, ge=1, le=10_000, description="model calls per parent turn")
    toolsets: list[str] = Field(default_factory=lambda: list(KNOWN_TOOLSETS), description="the parent's toolsets")
    context_window_tokens: int | None = Field(128_000, ge=256, description=(
        "the parent model's context window; near it, old turns are summarised (null = never)"))
    compress_at_ratio: float = Field(0.8, gt=0, le=1, description="compress when a request would pass this share")
    delegation: DelegationConfig = Field(default_factory=DelegationConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parsed = urlparse(value)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError("must be an http(s) URL such as https://api.openai.com/v1 or http://localhost:11434/v1")
        return value.rstrip("/")

    @field_validator("toolsets")
    @classmethod
    def _known_toolsets(cls, value: list[str]) -> list[str]:
        return validate_toolsets(value)


# -- reading ---------------------------------------------------------------------------------
def _describe(exc: ValidationError, where: str) -> str:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            problems.append(f"{key}: unknown key; remove it (known keys: {', '.join(_known_keys(key))})")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{key}: {msg} (got {err.get('input')!r})")
    return f"{where}: " + "; ".join(problems)


def _known_keys(key: str) -> list[str]:
    for section, model in (("delegation", DelegationConfig), ("ledger", LedgerConfig)):
        if key.startswith(f"{section}."):
            return [f"{section}.{name}" for name in model.model_fields]
    return list(OffloadConfig.model_fields)


_FILE_FIX = "Fix the file or run `offload config set KEY VALUE`."


def validate_config(data: Mapping[str, Any], where: str, fix: str = _FILE_FIX) -> OffloadConfig:
    try:
        return OffloadConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{_describe(exc, where)}. {fix}") from exc


def load_file_config(path: Path | None = None) -> OffloadConfig:
    """The file's settings over the defaults; no environment overrides."""
    path = path or config_path()
    return validate_config(read_config_file(path), str(path))


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> OffloadConfig:
    """The effective config: the file, then ``OFFLOAD_MODEL`` / ``OFFLOAD_BASE_URL``."""
    env = os.environ if env is None else env
    cfg = load_file_config(path)
    overrides = {key: env[name].strip() for key, name in ENV_OVERRIDES.items() if env.get(name, "").strip()}
    if not overrides:
        return cfg
    names = ", ".join(f"${ENV_OVERRIDES[k]}" for k in overrides)
    return validate_config({**cfg.model_dump(), **overrides}, f"environment variable {names}",
                           fix=f"Fix or unset {names} (config.yaml itself is valid).")


def resolve_api_key(cfg: OffloadConfig, env: Mapping[str, str] | None = None) -> str | None:
    """``OFFLOAD_API_KEY``, else the variable ``api_key_env`` names; a ConfigError with the fix
    when a hosted endpoint needs a key and none is set. Local servers need none."""
    env = os.environ if env is None else env
    key = env.get(API_KEY_OVERRIDE_ENV, "").strip() or env.get(cfg.api_key_env, "").strip()
    if key:
        return key
    host = (urlparse(cfg.base_url).hostname or "").lower()
    if any(host == h or host.endswith("." + h) for h in _HOSTS_NEEDING_A_KEY):
        raise ConfigError(
            f"no API key for {cfg.base_url}: export {cfg.api_key_env}=<your key> (or {API_KEY_OVERRIDE_ENV}), "
            "or run `offload demo` to try offload offline, or point base_url at a local server "
            "(offload config set base_url http://localhost:11434/v1)")
    return None


# -- dotted keys -----------------------------------------------------------------------------
def _field_of(key: str) -> Any:
    """The pydantic field a dotted key names; ConfigError listing the known keys otherwise."""
    parts = key.split(".")
    model: type[BaseModel] = OffloadConfig
    for depth, part in enumerate(parts):
        field = model.model_fields.get(part) if part else None
        if field is None:
            scope = ".".join(parts[:depth])
            known = ", ".join(f"{scope}.{name}" if scope else name for name in model.model_fields)
            raise ConfigError(f"unknown config key {key!r}; known keys: {known}")
        if depth == len(parts) - 1:
            return field
        nested = field.annotation
        if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
            raise ConfigError(f"{'.'.join(parts[:depth + 1])} is a single value, so {key!r} does not exist")
        model = nested
    raise AssertionError("unreachable")


def get_value(key: str, path: Path | None = None) -> Any:
    """The value of a dotted key as offload would use it (file over defaults, no env)."""
    _field_of(key)
    value: Any = load_file_config(path).model_dump()
    for part in key.split("."):
        value = value[part]
    return value


def parse_value(raw: str, field: Any) -> Any:
    """A command-line value as YAML (``10``, ``true``, ``null``, ``[a, b]``); text fields keep
    the text as typed, so a model named ``1234`` or ``yes`` stays a string."""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if field.annotation in (str, str | None) and value is not None and not isinstance(value, str):
        return raw
    return value


def set_value(key: str, raw: str, path: Path | None = None) -> Any:
    """Validate ``key = raw`` with the whole file, then write it atomically. Returns the value."""
    path = path or config_path()
    field = _field_of(key)
    value = parse_value(raw, field)
    data = copy.deepcopy(read_config_file(path))
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"{path}: {part} must be a mapping of keys to set {key}; fix the file first")
        node = child
    node[parts[-1]] = value
    default = _yaml_scalar(field.get_default(call_default_factory=True))
    validate_config(data, "invalid value", fix=f"{path} was not changed; the default is "
                    f"`offload config set {key} {default}`.")
    write_config_file(path, data)
    return value


def _yaml_scalar(value: Any) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def format_value(value: Any) -> str:
    """A value as the YAML a user would type back into ``config set``."""
    if isinstance(value, dict):
        return yaml.safe_dump(value, sort_keys=False).rstrip()
    return _yaml_scalar(value)


def write_config_file(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` atomically with ``data`` as YAML, owner-only; ConfigError if it cannot."""
    try:
        _replace_file(path, data)
    except OSError as exc:
        raise ConfigError(f"cannot write {path} ({exc.strerror or exc}); make {path.parent} writable by this user, "
                          "or point HERMES_HOME at a writable directory; the file was not changed") from exc


def _replace_file(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".yaml.tmp", dir=path.parent)  # created 0o600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(dict(data), f, sort_keys=False, allow_unicode=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
