"""YAML read as plain data, without aliases: the one loader of ``config.yaml`` and of the
values ``offload config set`` is given.

A YAML alias (``*name``) repeats the node its anchor (``&name``) names. PyYAML builds such a
document cheaply, sharing the node, but everything that walks it afterwards -- validation,
``offload config list``, a dump, JSON -- walks every repetition: nine lines of nested aliases
(a "billion laughs" bomb, under 1 KB) make every command use gigabytes and minutes. offload's
configuration has no use for them, so an alias is refused where the parser meets it, before
anything is built, with the line and the fix.

Invariant: ``load`` never returns a document that holds an alias; anchors alone are harmless
and allowed.
"""
from __future__ import annotations

from typing import Any

import yaml

from offload.errors import ConfigError


class AliasRefused(yaml.YAMLError):
    """A document holds an alias (``*name``); ``line`` counts from 1."""

    def __init__(self, anchor: str, line: int, column: int) -> None:
        super().__init__(f"alias *{anchor} at line {line}, column {column}")
        self.anchor, self.line, self.column = anchor, line, column


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise AliasRefused(event.anchor, event.start_mark.line + 1, event.start_mark.column + 1)
        return super().compose_node(parent, index)


def load(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing aliases (``AliasRefused``, a ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass


def alias_error(where: str, exc: AliasRefused, aside: str = "") -> ConfigError:
    """The error for a file (or value) ``where`` that uses an alias: the line and the fix."""
    move = f", or move the file aside ({aside}) to start from the defaults" if aside else ""
    return ConfigError(f"{where} uses a YAML alias (*{exc.anchor} at line {exc.line}, column {exc.column}); offload "
                       "does not expand YAML aliases in its configuration (a few lines of nested aliases can make "
                       f"every command use gigabytes). Write the value out in full where the alias stands{move}")
