"""``config.yaml`` as a document: read, change one dotted key, write back — comments, key order
and quoting kept (ruamel.yaml round trip), the file replaced atomically.

Invariants: a write replaces the file in one rename (temp file in the same directory, fsync,
mode 0o600), so a crash never leaves half a config; a file that is not valid YAML is one
``ConfigError`` line naming the line and column, never the parser's multi-line report.
"""
from __future__ import annotations

import io
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from offload.errors import ConfigError
from offload.home import AliasRefused, alias_error, load_yaml


def _yaml() -> YAML:
    yaml = YAML()  # round-trip mode
    yaml.preserve_quotes = True
    return yaml


def syntax_error(path: Path, exc: Exception) -> ConfigError:
    """One line for a YAML syntax error (PyYAML's or ruamel's): where, what, and the fix."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
    aside = f"mv {shlex.quote(str(path))} {shlex.quote(str(path) + '.bad')}"
    return ConfigError(f"{path} is not valid YAML{where}: {problem}; fix that line, or move the file aside "
                       f"({aside}) to start from the defaults")


def load_document(path: Path) -> CommentedMap:
    """The file as an editable mapping; empty when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return CommentedMap()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path} ({exc}); check its permissions and that it is UTF-8 text") from exc
    try:
        load_yaml(text)  # an alias bomb is refused before ruamel builds anything of it
        doc = _yaml().load(text)
    except AliasRefused as exc:
        raise alias_error(str(path), exc, f"mv {shlex.quote(str(path))} {shlex.quote(str(path) + '.bad')}") from exc
    except (YAMLError, yaml.YAMLError) as exc:
        raise syntax_error(path, exc) from exc
    if doc is None:
        return CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise ConfigError(f"{path} must hold a mapping of settings at the top level, got {type(doc).__name__}; "
                          f"move it aside (mv {path} {path}.bad) to start from the defaults")
    return doc


def _parent(doc: CommentedMap, key: str, create: bool) -> CommentedMap | None:
    node = doc
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            if not create:
                return None
            child = node[part] = CommentedMap()
        elif not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise ConfigError(f"{where} holds a single value, not a mapping of keys, so {key} cannot be set; "
                              f"run `offload config unset {where}` first")
        node = child
    return node


def set_key(doc: CommentedMap, key: str, value: Any) -> None:
    _parent(doc, key, create=True)[key.split(".")[-1]] = value  # type: ignore[index]


def unset_key(doc: CommentedMap, key: str) -> bool:
    """Remove ``key``, and each section it leaves empty (no ``delegation: {}`` behind); False
    if it was not in the file."""
    parent = _parent(doc, key, create=False)
    name = key.split(".")[-1]
    if parent is None or name not in parent:
        return False
    del parent[name]
    parts = key.split(".")[:-1]
    while parts:  # the innermost emptied section first
        section = _parent(doc, ".".join(parts), create=False)
        emptied = section.get(parts[-1]) if section is not None else None
        if not isinstance(emptied, dict) or emptied:
            break
        del section[parts[-1]]
        parts.pop()
    return True


def dump(doc: Any) -> str:
    if isinstance(doc, dict) and not doc:
        return ""  # a file with nothing set is empty, not "{}"
    out = io.StringIO()
    _yaml().dump(doc, out)
    return out.getvalue()


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text``, owner-only; ConfigError if it cannot."""
    try:
        _replace(path, text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path} ({exc.strerror or exc}); make {path.parent} writable by this user, "
                          "or point HERMES_HOME at a writable directory; the file was not changed") from exc


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".yaml.tmp", dir=path.parent)  # created 0o600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
