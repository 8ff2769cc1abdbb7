"""PostgreSQL ledger failures as one-line ``LedgerError``s: one kind per cause, each naming
the server (password redacted) and the fix; the cause libpq gives is scrubbed of the
password too (``offload.ledger.redaction``).

libpq reports connection failures without an SQLSTATE, so those are told apart by libpq's own
fixed phrases; errors from a live server are told apart by SQLSTATE class.
"""
from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

from offload.ledger.protocol import LedgerError
from offload.ledger.redaction import scrub

# kind -> phrases libpq uses for it (lower case)
_PHRASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("auth", ("password authentication failed", "no password supplied", "authentication failed",
              "pg_hba.conf", "role \"")),
    ("no-database", ("database \"",)),
    ("config", ("invalid integer value", "invalid uri", "missing \"=\"", "invalid connection option",
                "invalid sslmode", "unterminated quoted string", "invalid percent-encoded")),
    ("unreachable", ("connection refused", "could not connect", "timeout expired", "timed out",
                     "server closed the connection", "terminating connection", "connection is closed",
                     "connection is lost", "consuming input failed", "no route to host", "failed to resolve host",
                     "the database system is", "couldn't get a connection", "network is unreachable",
                     "connection reset", "ssl syscall", "broken pipe", "sending query failed",
                     "server conn crashed", "connection failed")),
)
# SQLSTATE classes of a live server that mean "the connection went away, try again later".
_UNREACHABLE_STATES = ("57P01", "57P02", "57P03", "08000", "08001", "08003", "08004", "08006", "08007")


def redact(url: str) -> str:
    """``url`` without its password, for log lines and error messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "<unparseable ledger.url>"
    host, port, dbname = params.get("host", "localhost"), params.get("port", "5432"), params.get("dbname", "")
    user = params.get("user")
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{dbname}"


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, LedgerError):
        return exc.kind
    state = getattr(exc, "sqlstate", None)
    if state:
        if state in _UNREACHABLE_STATES:
            return "unreachable"
        if state.startswith("28"):
            return "auth"
        if state == "3D000":
            return "no-database"
        if state.startswith("53"):
            return "full"
        return "error"
    if isinstance(exc, psycopg.ProgrammingError) and not isinstance(exc, psycopg.errors.UndefinedTable):
        return "config"
    text = str(exc).lower()
    for kind, phrases in _PHRASES:
        if any(phrase in text for phrase in phrases):
            return kind
    if isinstance(exc, (psycopg.OperationalError, OSError)):
        return "unreachable"
    return "error"


def classify(where: str, exc: BaseException, url: str = "") -> LedgerError:
    """A raw psycopg/pool error as a ``LedgerError`` naming the server, the cause and the fix;
    libpq's text is scrubbed of ``url``'s password (it quotes values it could not use)."""
    if isinstance(exc, LedgerError):
        return exc
    kind = error_kind(exc)
    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    cause = scrub(cause, url)
    fixes = {
        "auth": f"the ledger database {where} refused the login ({cause}); fix the user or password in "
                "ledger.url (or OFFLOAD_LEDGER_URL)",
        "no-database": f"the ledger database {where} does not exist ({cause}); create it "
                       "(createdb) or fix the database name in ledger.url",
        "config": f"ledger.url {where} is not a valid PostgreSQL URL ({cause}); use "
                  "postgresql://USER:PASSWORD@HOST:PORT/DATABASE",
        "unreachable": f"the ledger database {where} is unreachable ({cause}); start PostgreSQL or fix the host "
                       "and port in ledger.url",
        "full": f"the ledger database {where} is out of resources ({cause}); free disk or raise its limits",
    }
    message = fixes.get(kind, f"ledger operation on {where} failed: {type(exc).__name__}: {cause}")
    return LedgerError(message, kind=kind)
