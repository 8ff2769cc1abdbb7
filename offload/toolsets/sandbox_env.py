"""The environment a shell command gets: an allow-list, never offload's own.

Owns ``command_environment``. Invariant: a variable reaches a command only when its name is on
``ALLOWED`` (or matches ``LC_*``) or the operator listed it in ``terminal.env_passthrough``; so
``OFFLOAD_LEDGER_URL`` (a DSN with its password), API keys, tokens and ``HERMES_HOME`` never do,
whatever they are called. ``HOME`` is the sandbox's (an empty private folder at the same path)
and ``TMPDIR`` its private ``/tmp``.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

ALLOWED = frozenset({"PATH", "LANG", "LANGUAGE", "TERM", "TZ", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
                     "USER", "LOGNAME", "SHELL", "PYTHONIOENCODING", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"})


def command_environment(passthrough: Iterable[str] = (), *, environ: Mapping[str, str] | None = None,
                        home: str | None = None) -> dict[str, str]:
    """The allowed part of ``environ`` (offload's environment), with ``HOME`` and ``TMPDIR`` set."""
    source = os.environ if environ is None else environ
    extra = set(passthrough)
    env = {name: value for name, value in source.items()
           if name in ALLOWED or name.startswith("LC_") or name in extra}
    env.setdefault("PATH", os.defpath)
    env["HOME"] = home if home is not None else source.get("HOME", "/")
    env["TMPDIR"] = "/tmp"
    return env
