"""Server-side prepared statements for the PostgreSQL ledger's hot scripts (issue 31).

A hot write is one simple-query string of a few statements (``postgres.script``). Sent as
text, PostgreSQL parses and plans every statement of it on every call: for the ledger's wide
``INSERT … ON CONFLICT`` and the claim's CTE that is most of the server's time per write
(~100-150 µs of a dispatch on the benchmark's machine). So each statement is prepared once
per connection (``PREPARE offload_<hash> AS …``, the parameters numbered ``$1…``) and the
script sends ``EXECUTE offload_<hash>(…)`` instead, its values still bound on the client. The
first script on a connection carries its ``PREPARE``s in the same string: still one round trip.

Invariants: a statement is prepared at most once per connection (``PREPARE`` of an existing
name is an error); prepared statements outlive a failed transaction, so after a script fails
this connection's set is read back from ``pg_prepared_statements`` before its next use instead
of guessed; a script's results are its own statements', never the ``PREPARE``s'. Semantics
are those of the text: one implicit transaction, a fresh snapshot per statement.

Where the server's session is not the connection's own (a transaction-pooling PgBouncer in
between, or a ``DISCARD ALL``), a statement counted as prepared is missing, or one counted as
new exists: the script fails as a whole (nothing of it is kept), ``mismatched`` turns prepared
scripts off for the rest of the process, and the caller sends it again as plain text.
"""
from __future__ import annotations

import hashlib
import logging
import re
import weakref
from typing import Any, Sequence

import psycopg

logger = logging.getLogger("offload.engine")
# the server's sessions do not hold what this process prepared on its connections
MISMATCH = (psycopg.errors.InvalidSqlStatementName, psycopg.errors.DuplicatePreparedStatement)

_PLACEHOLDER = re.compile(r"%s")
_NAMES: dict[str, str] = {}  # statement text -> its prepared name (the same on every connection)
# per connection: the names prepared on it; None while unknown (after a failed script)
_ON_CONNECTION: "weakref.WeakKeyDictionary[Any, set[str] | None]" = weakref.WeakKeyDictionary()
_enabled = True  # off for the rest of the process after a ``MISMATCH``
_LIST = "SELECT name FROM pg_prepared_statements WHERE name LIKE 'offload\\_%'"


def name_of(sql: str) -> str:
    name = _NAMES.get(sql)
    if name is None:
        name = _NAMES.setdefault(sql, "offload_" + hashlib.sha1(sql.encode()).hexdigest()[:20])
    return name


def _numbered(sql: str) -> str:
    """``%s`` placeholders as ``$1, $2, …`` (what ``PREPARE`` takes)."""
    counter = iter(range(1, sql.count("%s") + 1))
    return _PLACEHOLDER.sub(lambda _m: f"${next(counter)}", sql)


def _prepared_on(conn: Any) -> set[str]:
    names = _ON_CONNECTION.get(conn)
    if names is None:  # a new connection (nothing prepared), or unknown after a failed script
        names = set() if conn not in _ON_CONNECTION else {name for (name,) in conn.execute(_LIST).fetchall()}
        _ON_CONNECTION[conn] = names
    return names


def script(conn: Any, statements: Sequence[str]) -> tuple[str, list[str], int]:
    """(the text to send, the names it prepares, how many leading results are ``PREPARE``s')
    for ``statements`` on ``conn``: each one as ``EXECUTE``, prepared first if it is new here
    (plain text once prepared scripts are off)."""
    if not _enabled:
        return ";\n".join(statements), [], 0
    prepared = _prepared_on(conn)
    new: list[str] = []
    parts: list[str] = []
    for sql in statements:
        name, count = name_of(sql), sql.count("%s")
        if name not in prepared and name not in new:
            new.append(name)
            parts.insert(len(new) - 1, f"PREPARE {name} AS {_numbered(sql)}")
        parts.append(f"EXECUTE {name}" + (f"({', '.join(['%s'] * count)})" if count else ""))
    return ";\n".join(parts), new, len(new)


def ran(conn: Any, new: list[str], ok: bool) -> None:
    """After the script: its new names are prepared; after a failure nobody knows which."""
    if ok:
        _prepared_on(conn).update(new)
    elif new:
        _ON_CONNECTION[conn] = None


def enabled() -> bool:
    """Whether this process still prepares statements (no ``MISMATCH`` seen)."""
    return _enabled


def mismatched() -> None:
    """A session did not hold what this process prepared (see the module doc): plain text
    from now on, in this process."""
    global _enabled
    if _enabled:
        logger.warning("Delegation ledger: the PostgreSQL server's sessions do not keep this process's prepared "
                       "statements (a transaction-pooling PgBouncer?); the ledger's writes are sent as plain text "
                       "from now on, which costs the server a parse and plan per statement.")
    _enabled = False
    _ON_CONNECTION.clear()
