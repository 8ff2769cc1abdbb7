"""The delegation ledger: the interface (``DelegationLedger``), its row types and error, and
``open_ledger(url)``, the one place that names a backend: SQLite (a path or ``sqlite:///``),
PostgreSQL (``postgresql://``, several hosts sharing one ledger) and memory (``memory://NAME``).

Backends are imported lazily by ``open_ledger`` so a driver (psycopg) is loaded only when used;
import ``offload.ledger.sqlite``, ``.postgres`` or ``.memory`` directly only to reach backend
specifics. ``offload.ledger.select`` picks the backend from the ``ledger:`` settings.
"""
from offload.ledger.factory import open_ledger, redact
from offload.ledger.protocol import DelegationLedger, DispatchRow, JournalEntry, LedgerError, LedgerRow

__all__ = ["DelegationLedger", "DispatchRow", "JournalEntry", "LedgerError", "LedgerRow", "open_ledger", "redact"]
