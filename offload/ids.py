"""Unique id prefixes: ``deleg_eb85`` (or just ``eb85``) and ``sess_3f`` stand for the one id they start.

Like git's short hashes: an exact id always wins; otherwise the prefix must match exactly one
known id, and an ambiguous or unknown one is a ``CliError`` naming the candidates and the
command that lists them.
"""
from __future__ import annotations

from typing import Iterable

from offload.errors import CliError

_SHOWN = 5


def resolve(wanted: str, known: Iterable[str], *, kind: str, id_prefix: str, listing: str) -> str:
    """The one id in ``known`` that ``wanted`` names (``id_prefix`` may be left out)."""
    wanted = wanted.strip()
    ids = sorted(set(known))
    candidates = [wanted] if wanted.startswith(id_prefix) else [wanted, id_prefix + wanted]
    for candidate in candidates:
        if candidate in ids:
            return candidate
    matches = sorted({i for i in ids for c in candidates if c and i.startswith(c)})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CliError(f"no {kind} {wanted!r}; `{listing}` lists them")
    shown = ", ".join(matches[:_SHOWN]) + (", …" if len(matches) > _SHOWN else "")
    raise CliError(f"{wanted!r} matches {len(matches)} {kind}s ({shown}); type more of the id")
