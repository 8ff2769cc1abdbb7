"""Facade: the SQLite ledger moved to ``delegation.ledger.sqlite``; these names stay
importable here. To change behaviour in a test, patch ``delegation.ledger.sqlite`` itself:
the backend reads its own module globals, not these copies."""
from delegation.ledger.sqlite import (  # noqa: F401
    BUSY_TIMEOUT_S, SqliteLedger, classify_error, connect, initialize_schema, is_locked, open_connection,
    retry_while_locked, secure_files,
)
from delegation.ledger.sqlite_rows import _INSERT_DISPATCH, _UPSERT_COLUMNS, dumps  # noqa: F401
