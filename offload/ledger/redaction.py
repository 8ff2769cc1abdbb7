"""Ledger URLs (DSNs) without their passwords, for every message, log line and view.

Owns finding the secret in a DSN however it is written -- ``postgresql://user:PW@host/db``
with the password percent-encoded or not (an unencoded ``/``, ``?``, ``#`` or ``@`` in it
breaks a URL parser's idea of where the host begins), ``?password=PW`` and
``&sslpassword=PW`` query parameters, libpq's ``key=value`` form (``password=PW`` or
``password='P W'``), and a string no parser accepts -- and removing it: ``redact(url)`` for
the URL itself, ``scrub(text, url)`` for text that may echo part of it (libpq's error
messages quote the values they could not use: ``invalid integer value "PW" for connection
option "port"``).

Invariant: no function here raises, and none returns a password of its input, whole or in
part as libpq quotes it; when in doubt it removes more (a user name), never less.
"""
from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
_PARAM = re.compile(r"(?i)\b((?:ssl)?password)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&\s#]*)")
# A malformed key=value string (``password PW``): libpq refuses it, and shows the text to no one.
_LOOSE = re.compile(r"(?i)\b((?:ssl)?password)(\s+)([^\s=]\S*)")
_QUOTED = re.compile(r'"([^"]*)"')
_DELIMITERS = re.compile(r"[@/?#:&=\s]+")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)$", re.S)


def redact(url: str) -> str:
    """``url`` with every password in it replaced by ``***`` (the user name kept)."""
    text = _PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", str(url))
    text = _LOOSE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    scheme = _SCHEME.match(text)
    if scheme is None or "@" not in scheme.group(2):
        return text
    credentials, _, rest = scheme.group(2).rpartition("@")  # the last @: an unencoded one belongs to the password
    user, colon, _ = credentials.partition(":")
    if "/" in user or "?" in user:  # no user:password part before the host: nothing more to hide
        return text
    return f"{scheme.group(1)}{user}{':' + MASK if colon else ''}@{rest}"


def secrets_of(url: str) -> list[str]:
    """The passwords in ``url`` as written and percent-decoded, longest first."""
    url = str(url)
    found = [m.group(3).strip("'") for pattern in (_PARAM, _LOOSE) for m in pattern.finditer(url)]
    scheme = _SCHEME.match(url)
    if scheme is not None and "@" in scheme.group(2):
        credentials = scheme.group(2).rpartition("@")[0]
        if ":" in credentials:
            found.append(credentials.partition(":")[2])
    found += [unquote(secret) for secret in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` (an error message about ``url``) without the passwords of ``url``: each one
    anywhere in it, every ``password=`` value, and every double-quoted value libpq cites that
    is a piece of one (a malformed URL is split at the wrong places, so libpq may quote a part)."""
    secrets = secrets_of(url)
    text = _PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", str(text))
    for secret in secrets:
        text = text.replace(secret, MASK)

    # A password with an unencoded delimiter is cut there by libpq's parser: it may cite a value
    # made of a piece of the password and what follows it.
    pieces = {piece for secret in secrets for piece in _DELIMITERS.split(secret) if len(piece) >= 2}

    def quoted(match: re.Match[str]) -> str:
        value = match.group(1)
        cited = value and (any(value in secret for secret in secrets) or any(piece in value for piece in pieces))
        return f'"{MASK}"' if cited else match.group(0)
    return _QUOTED.sub(quoted, text)
