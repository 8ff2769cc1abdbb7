"""The whole ``$HERMES_HOME/config.yaml``, validated; ``offload config get/set/unset``; the API key.

Owns ``OffloadConfig`` (top-level keys, with the ``delegation:`` section validated by the
engine's own ``DelegationConfig``), the ``OFFLOAD_*`` and ``DELEGATION_MAX_CONCURRENT_CHILDREN``
environment overrides, and dotted-key reads and writes.

Invariants: every problem is found when the config is loaded or set, not at run time (an
unknown or deprecated key, a wrong type, a workspace that does not exist, a bad environment
variable), and is reported as one line per file naming each key, what is wrong and the command
that fixes it. ``set`` validates the new value with the whole file BEFORE writing: a bad value
leaves the file byte-for-byte unchanged, while problems in OTHER keys do not block repairing
this one (they are reported). The file keeps its comments and key order (``config_file``).
Errors never fall back to defaults silently.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from offload.agent.llm_stream import DEFAULT_STREAM_IDLE_TIMEOUT_S
from offload.agent.toolsets import KNOWN_TOOLSETS, validate_toolsets
from offload.gateway.config import GatewayConfig
from offload import config_file
from offload.errors import ConfigError
from offload.home import AliasRefused, alias_error, load_yaml, read_config_file
from offload.subagents.config import DelegationConfig
from offload.home import config_path
from offload.ledger.config import LedgerConfig
from offload.ledger.factory import redact
from offload.toolsets.terminal_sandbox import TerminalConfig
from offload.toolsets.web_config import WebConfig

__all__ = ["ConfigError", "OffloadConfig", "get_value", "load_config", "resolve_api_key", "set_value", "unset_value"]

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
ENV_OVERRIDES = {"model": "OFFLOAD_MODEL", "base_url": "OFFLOAD_BASE_URL"}
CHILDREN_ENV = "DELEGATION_MAX_CONCURRENT_CHILDREN"
DEPRECATED = {"delegation.max_async_children": "deprecated and ignored (delegation.max_concurrent_children caps "
                                               "background units too)"}
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
    stream_idle_timeout_s: float = Field(DEFAULT_STREAM_IDLE_TIMEOUT_S, gt=0, le=86_400, description=(
        "seconds a model call may receive nothing (no token, keep-alive or progress) before it fails; "
        "raise it for a slow local server reading a long prompt"))
    delegation: DelegationConfig = Field(default_factory=DelegationConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    terminal: TerminalConfig = Field(default_factory=TerminalConfig)

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

    @field_validator("workspace")
    @classmethod
    def _existing_directory(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_dir():
            raise ValueError("is not an existing directory; create it, or use null for the current directory")
        return value


# -- reading ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One bad key: what is wrong, and the command that repairs it."""

    key: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message} (fix: {self.fix})"


def _default_text(key: str) -> str:
    try:
        default = _field_of(key).get_default(call_default_factory=True)
    except ConfigError:
        return "null"
    return _yaml_scalar(default)


def problems(data: Mapping[str, Any]) -> list[Problem]:
    """Every problem of the settings ``data``, each with its repairing command."""
    found = []
    section = data.get("delegation")
    for key, why in DEPRECATED.items():
        if isinstance(section, dict) and section.get(key.split(".")[1]) is not None:
            found.append(Problem(key, why, f"offload config unset {key}"))
    try:
        OffloadConfig.model_validate(data)
    except ValidationError as exc:
        found += [_problem(err) for err in exc.errors()]
    return found


def _problem(err: Any) -> Problem:
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        return Problem(key, "unknown key", f"offload config unset {key}")
    message = f"{err['msg'].removeprefix('Value error, ')} (got {for_display(err.get('input'), key)!r})"
    return Problem(key, message, _set_default_command(_setting_of(err["loc"])))


def _setting_of(loc: tuple[Any, ...]) -> str:
    """The key ``config set`` can write for an error at ``loc``: an element of a list
    (``toolsets.0``) is repaired by setting the whole list."""
    parts = []
    for part in loc:
        if isinstance(part, int):
            break
        parts.append(str(part))
    return ".".join(parts)


def _set_default_command(key: str) -> str:
    """``offload config set KEY DEFAULT``, quoted so that it can be pasted into a shell; for a
    whole section (``ledger: 5``), ``offload config unset KEY``, which restores its defaults."""
    try:
        annotation = _field_of(key).annotation
    except ConfigError:
        annotation = None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"offload config unset {key}"
    return f"offload config set {key} {shlex.quote(_default_text(key))}"


def validate_config(data: Mapping[str, Any], where: str, fix: str = "") -> OffloadConfig:
    found = problems(data)
    if found:
        raise ConfigError(f"{where}: " + "; ".join(map(str, found)) + (f". {fix}" if fix else ""))
    return OffloadConfig.model_validate(data)


def read_settings(path: Path) -> dict[str, Any]:
    """The file's settings as plain data; a YAML syntax error is one line."""
    try:
        return read_config_file(path)
    except ConfigError as exc:
        if isinstance(exc.__cause__, yaml.YAMLError):
            raise config_file.syntax_error(path, exc.__cause__) from exc.__cause__
        raise


def load_file_config(path: Path | None = None) -> OffloadConfig:
    """The file's settings over the defaults; no environment overrides."""
    path = path or config_path()
    return validate_config(read_settings(path), str(path))


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> OffloadConfig:
    """The effective config: the file, then ``OFFLOAD_MODEL`` / ``OFFLOAD_BASE_URL``."""
    env = os.environ if env is None else env
    cfg = load_file_config(path)
    _check_children_env(cfg, env)
    overrides = {key: env[name].strip() for key, name in ENV_OVERRIDES.items() if env.get(name, "").strip()}
    if not overrides:
        return cfg
    names = ", ".join(f"${ENV_OVERRIDES[k]}" for k in overrides)
    return validate_config({**cfg.model_dump(), **overrides}, f"environment variable {names}",
                           fix=f"Fix or unset {names} (config.yaml itself is valid).")


def _check_children_env(cfg: OffloadConfig, env: Mapping[str, str]) -> None:
    """The engine reads this variable when a call dispatches; a bad one must fail now, not then."""
    raw = env.get(CHILDREN_ENV, "").strip()
    if not raw or "max_concurrent_children" in cfg.delegation.model_fields_set:
        return
    field = DelegationConfig.model_fields["max_concurrent_children"]
    low, high = (getattr(m, name) for m in field.metadata for name in ("ge", "le") if hasattr(m, name))
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ConfigError(f"environment variable ${CHILDREN_ENV} must be a whole number from {low} to {high}, "
                          f"got {raw!r}; fix or unset it")


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


def parse_value(raw: str, field: Any, key: str = "") -> Any:
    """A command-line value as YAML (``10``, ``-3``, ``true``, ``null``, ``[a, b]``). Text fields
    keep a scalar as typed (a model named ``1234`` or ``yes`` stays text); a value that looks
    like a list or mapping must parse as one, and cannot go into a text field."""
    looks_structured = raw.lstrip()[:1] in ("[", "{")
    try:
        value = load_yaml(raw)
    except AliasRefused as exc:
        raise alias_error(f"the value of {key}", exc) from exc
    except yaml.YAMLError as exc:
        if looks_structured:
            problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
            raise ConfigError(f"{key}: {raw!r} is not a valid YAML/JSON value ({problem}); close the brackets, or "
                              f"quote it to store the text: offload config set {key} '\"{raw}\"'") from exc
        return raw
    if field.annotation in (str, str | None):
        if isinstance(value, (list, dict)):
            raise ConfigError(f"{key} is text, but {raw!r} is a {type(value).__name__}; quote it to store the text: "
                              f"offload config set {key} '\"{raw}\"'")
        if value is not None and not isinstance(value, str):
            return raw
    return value


def set_value(key: str, raw: str, path: Path | None = None) -> tuple[Any, list[Problem]]:
    """Validate ``key = raw`` with the whole file, then write it (comments and order kept).

    Returns the value and the problems left in OTHER keys (they do not block this repair)."""
    path = path or config_path()
    if key in DEPRECATED:
        raise ConfigError(f"{key} is {DEPRECATED[key]}; {path} was not changed")
    value = parse_value(raw, _field_of(key), key)
    doc = config_file.load_document(path)
    config_file.set_key(doc, key, value)
    text = config_file.dump(doc)
    found = problems(load_yaml(text) or {})  # load_document refused aliases already
    mine = [p for p in found if p.key == key or _within(key, p.key) or _within(p.key, key)]
    if mine:
        raise ConfigError(f"invalid value: {'; '.join(p.key + ': ' + p.message for p in mine)}. {path} was not "
                          f"changed; the default is `{_set_default_command(key)}`")
    config_file.write_text(path, text)
    return value, [p for p in found if p not in mine]


def _within(key: str, outer: str) -> bool:
    """Whether ``key`` names ``outer`` itself or something inside it (``toolsets.0`` in ``toolsets``)."""
    return key == outer or key.startswith(outer + ".")


def unset_value(key: str, path: Path | None = None) -> bool:
    """Remove ``key`` from the file (known or not: this is how an unknown key is repaired)."""
    path = path or config_path()
    doc = config_file.load_document(path)
    if not config_file.unset_key(doc, key):
        return False
    config_file.write_text(path, config_file.dump(doc))
    return True


def _yaml_scalar(value: Any) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


SECRET_URLS = ("ledger.url",)  # printed with the password masked, everywhere


def for_display(value: Any, key: str = "") -> Any:
    """``value`` of ``key`` (the whole config for ``""``) as offload prints it: passwords masked."""
    if key in SECRET_URLS and isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: for_display(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    return value


def format_value(value: Any) -> str:
    """A value as the YAML a user would type back into ``config set``."""
    if isinstance(value, dict):
        return yaml.safe_dump(value, sort_keys=False).rstrip()
    return _yaml_scalar(value)


def write_config_file(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` atomically with ``data`` as YAML, owner-only; ConfigError if it cannot."""
    config_file.write_text(path, yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True))
