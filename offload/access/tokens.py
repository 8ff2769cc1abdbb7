"""The access tokens of one offload home: the secret a person's browser and MCP clients present
to ``offload dashboard`` and ``offload mcp --http`` (``tokens.json`` in ``$HERMES_HOME``).

The store holds NAMED tokens. ``operator`` is the person's own: the dashboard accepts it alone
(it decides approvals and stops work); the MCP server accepts it and every other named token
(``offload token add NAME``: one per MCP client, so one can be revoked without the others; the
binding of a name to an MCP namespace is issue 43's). The operator token is made on first need.
``OFFLOAD_DASHBOARD_TOKEN`` / ``OFFLOAD_MCP_TOKEN`` replace the store for one server
(``resolve``); ``--token`` on a command line still works but warns (any local process reads it
with ``ps``).

Invariants:
- the file is mode 0600 in a home that is never shared, and is refused (with the ``chmod`` to
  run) when anyone else may read it; every write is a new 0600 file renamed over the old one
  under an exclusive lock, so a reader sees the old or the new store, never half of one, and two
  processes starting at once agree on one operator token;
- every token is at least ``MIN_LENGTH`` characters; a shorter one (from the file, the
  environment or the command line) is refused with the fix;
- a token never reaches a log, an exception or ``repr``: messages name the token, not its value.
  The only places it is printed are ``offload token show|add|rotate`` and the dashboard's start
  banner (the URL to open once).
"""
from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import secrets
import stat
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from offload.errors import CliError

FILE_NAME = "tokens.json"
OPERATOR = "operator"
MIN_LENGTH = 32
_NEW_TOKEN_BYTES = 32  # 43 url-safe characters
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_FORMAT = 1


class TokenStore:
    """The tokens of the home ``home``; every call reads the file afresh (a rotation or a new
    client is seen at once), kept from re-parsing while its mtime and size stay the same."""

    def __init__(self, home: Path | str) -> None:
        self.home = Path(home)
        self.path = self.home / FILE_NAME
        self._seen: tuple[tuple[int, int], dict[str, str]] | None = None

    def __repr__(self) -> str:
        return f"<TokenStore {str(self.path)!r}>"

    def get(self, name: str = OPERATOR) -> str:
        """The token ``name``; the operator's is made (and the file) when missing."""
        tokens = self.tokens()
        if name in tokens:
            return tokens[name]
        if name != OPERATOR:
            raise CliError(f"no token named {name!r} in {self.path}; add one with: offload token add {name}")
        with self._locked() as data:
            entries = data["tokens"]
            if OPERATOR not in entries:
                entries[OPERATOR] = _entry()
            return entries[OPERATOR]["token"]

    def tokens(self) -> dict[str, str]:
        """Every token by name ({} when the file does not exist yet)."""
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return {}
        key = (info.st_mtime_ns, info.st_size)
        if self._seen is None or self._seen[0] != key:
            self._seen = (key, {n: e["token"] for n, e in self._read()["tokens"].items()})
        return dict(self._seen[1])

    def match(self, offered: str) -> str | None:
        """The name of the token ``offered`` is (compared in constant time), else None."""
        found = None
        for name, token in self.tokens().items():
            if same_token(offered, token):
                found = name
        return found

    def add(self, name: str) -> str:
        """A new random token named ``name`` (refused if the name is taken)."""
        _check_name(name)
        with self._locked() as data:
            if name in data["tokens"]:
                raise CliError(f"a token named {name!r} exists already; `offload token rotate {name}` replaces it")
            data["tokens"][name] = _entry()
            return data["tokens"][name]["token"]

    def rotate(self, name: str = OPERATOR) -> str:
        """Replace token ``name`` with a new random one: whoever held the old one is locked out."""
        with self._locked() as data:
            if name not in data["tokens"] and name != OPERATOR:
                raise CliError(f"no token named {name!r} in {self.path}; add one with: offload token add {name}")
            data["tokens"][name] = _entry()
            return data["tokens"][name]["token"]

    def remove(self, name: str) -> None:
        with self._locked() as data:
            if name not in data["tokens"]:
                raise CliError(f"no token named {name!r} in {self.path} (see `offload token list`)")
            del data["tokens"][name]

    def listing(self) -> list[tuple[str, float | None]]:
        """(name, created_at) of every token, without the secrets."""
        if not self.path.exists():
            return []
        return [(n, e.get("created_at")) for n, e in sorted(self._read(strict=False)["tokens"].items())]

    def _read(self, strict: bool = True) -> dict[str, Any]:
        """The parsed file; ``strict``: refuse a short token (not when rewriting: rotate repairs it)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return {"format": _FORMAT, "tokens": {}}
        except OSError as exc:
            raise CliError(f"cannot read the token store {self.path} ({exc.strerror}); check its permissions, or "
                           f"move it aside and a new token is made") from None
        with os.fdopen(fd, "rb") as file:
            _check_private(self.path, os.fstat(file.fileno()))
            raw = file.read()
        return _parse(self.path, raw, strict)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """Read, let the caller change, and write back atomically, under an exclusive lock."""
        import fcntl

        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_fd = os.open(self.home / (FILE_NAME + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            data = self._read(strict=False)
            yield data
            _write_atomic(self.path, json.dumps(data, indent=2, sort_keys=True).encode() + b"\n")
            self._seen = None
        finally:
            os.close(lock_fd)  # closing releases the lock


def _entry() -> dict[str, Any]:
    return {"token": secrets.token_urlsafe(_NEW_TOKEN_BYTES), "created_at": round(time.time(), 3)}


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise CliError(f"token name {name!r} is not allowed: use letters, digits, '.', '_' or '-' (at most 64), "
                       "e.g. offload token add claude-code")


def _check_private(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise CliError(f"the token store {path} is not a regular file; move it aside and a new one is made")
    if info.st_mode & 0o077:
        raise CliError(f"the token store {path} may be read by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
                       f"run: chmod 600 {path}  (and `offload token rotate` if someone may have read it)")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise CliError(f"the token store {path} belongs to another user (uid {info.st_uid}); "
                       "run offload as its owner, or move the file aside and a new one is made")


def _parse(path: Path, raw: bytes, strict: bool) -> dict[str, Any]:
    broken = (f"the token store {path} is damaged ({{}}); move it aside (`offload token rotate` makes a new "
              "one; clients then need the new token)")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CliError(broken.format(f"not JSON: {exc.__class__.__name__}")) from None
    entries = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise CliError(broken.format("no 'tokens' mapping"))
    for name, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            raise CliError(broken.format(f"token {name!r} has no 'token' text"))
        if strict:
            check_length(entry["token"], f"the token {name!r} in {path}", f"offload token rotate {name}")
    return data


def _write_atomic(path: Path, content: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash once the folder is synced
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def same_token(offered: str, token: str) -> bool:
    """``offered`` is ``token``, compared in constant time (the one compare every server uses);
    an empty offer never is."""
    return bool(offered) and hmac.compare_digest(offered.encode(), token.encode())


def check_length(token: str, source: str, fix: str) -> str:
    """``token`` when it is long enough; else a clear refusal naming ``source`` and ``fix``."""
    if len(token.strip()) < MIN_LENGTH:
        raise CliError(f"{source} is too short ({len(token.strip())} characters; at least {MIN_LENGTH} are "
                       f"required, so it cannot be guessed). Fix: {fix}")
    return token.strip()


def resolve(home: Path, *, env_var: str, flag: str | None = None) -> tuple[str | None, str]:
    """The token a server on ``home`` requires: ``--token`` (deprecated, warns), else ``$env_var``,
    else the store's operator token (made on first need). Returns (token from flag or env, or
    None meaning "the store's"; where it came from, for the start banner)."""
    if flag is not None:
        print(f"offload: warning: --token is deprecated: a command line is visible to every local process "
              f"(ps, /proc/PID/cmdline). Set {env_var} instead, or drop it and use the token store "
              f"({home / FILE_NAME}; `offload token show` prints it).", file=sys.stderr)
        return check_length(flag, "the --token value", f"use {env_var} with e.g. \"$(openssl rand -hex 32)\", "
                            "or drop --token to use the token store"), "--token"
    value = os.environ.get(env_var)
    if value is not None:
        return check_length(value, f"${env_var}", f"set it to a long random value, e.g. "
                            f"{env_var}=\"$(openssl rand -hex 32)\", or unset it to use the token store"), f"${env_var}"
    return None, str(home / FILE_NAME)


def accepted(home: Path, token: str | Callable[[], str] | None, *, env_var: str) -> Callable[[], str]:
    """A function giving the operator token a server on ``home`` accepts now: ``token`` when
    given (a value is checked for length), else ``$env_var``, else the store's operator token,
    read at each call so a rotation takes effect at once (made here if missing)."""
    if callable(token):
        return token
    if token is not None:
        fixed = check_length(token, "the token given", f"pass a long random value, or none to use {home / FILE_NAME}")
        return lambda: fixed
    fixed, _source = resolve(home, env_var=env_var)
    if fixed is not None:
        return lambda: fixed
    store = TokenStore(home)
    store.get(OPERATOR)
    return lambda: store.get(OPERATOR)
