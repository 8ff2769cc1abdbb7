"""Where offload keeps its data: ``$HERMES_HOME`` (default ``~/.hermes``), and its
``config.yaml`` read as plain data (``read_config_file``; validation is the caller's).

YAML is read without aliases (``load_yaml``): an alias (``*name``) repeats the node its anchor
names; PyYAML builds such a document cheaply, sharing the node, but whatever walks it afterwards
(validation, ``offload config show``, a dump, JSON) walks every repetition: nine lines of
nested aliases (a "billion laughs" bomb, under 1 KB) made every command use gigabytes. The
configuration has no use for them, so an alias is refused where the parser meets it, before
anything is built, with its line and the fix; anchors alone are harmless and allowed.

Resolved at call time from the environment, because one process may serve several homes
(tests, profiles) and the ledger must always write to the home of the caller. Only the
string-to-``Path`` work is remembered (for the last environment seen): the ledger asks for
these paths on every dispatch.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from offload.errors import ConfigError

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


def read_config_file(path: Path | None = None) -> dict[str, Any]:
    """The whole config file as a mapping; ``{}`` when it does not exist."""
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}; check its permissions") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc}); save it as UTF-8 or move the file aside") from exc
    import yaml  # here: `offload --help` resolves paths but never reads YAML

    try:
        data = load_yaml(text)
    except AliasRefused as exc:
        raise alias_error(str(path), exc, f"mv {path} {path}.bad") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML ({exc}); fix the syntax or move the file aside") from exc
    except RecursionError as exc:
        raise ConfigError(f"{path} nests too deeply to read; flatten it or move the file aside") from exc
    except Exception as exc:  # a YAML tag or scalar the loader cannot build: !!timestamp 2001-13-45, huge ints
        raise ConfigError(f"{path} has a value YAML cannot read ({type(exc).__name__}: {exc}); "
                          "fix or quote that value, or move the file aside") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings at the top level, got {type(data).__name__}")
    return data


class AliasRefused(ValueError):
    """A document holds an alias (``*name``); ``line`` counts from 1."""

    def __init__(self, anchor: str, line: int, column: int) -> None:
        super().__init__(f"alias *{anchor} at line {line}, column {column}")
        self.anchor, self.line, self.column = anchor, line, column


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing aliases (``AliasRefused``, a ``yaml.YAMLError``)."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise AliasRefused(event.anchor, event.start_mark.line + 1, event.start_mark.column + 1)
            return super().compose_node(parent, index)

    return yaml.load(text, Loader=NoAliasLoader)  # noqa: S506 - a SafeLoader subclass


def alias_error(where: str, exc: AliasRefused, aside: str = "") -> ConfigError:
    """The error for a file (or value) ``where`` that uses an alias: the line and the fix."""
    move = f", or move the file aside ({aside}) to start from the defaults" if aside else ""
    return ConfigError(f"{where} uses a YAML alias (*{exc.anchor} at line {exc.line}, column {exc.column}); offload "
                       "does not expand YAML aliases in its configuration (a few lines of nested aliases can make "
                       f"every command use gigabytes). Write the value out in full where the alias stands{move}")
