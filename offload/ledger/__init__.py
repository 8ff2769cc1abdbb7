"""The delegation ledger: the interface (``DelegationLedger``), its row types and error, and
``open_ledger(url)``, the one place that names a backend (SQLite, memory).

Backends are imported lazily by ``open_ledger`` so a driver is loaded only when used; import
``offload.ledger.sqlite`` or ``.memory`` directly only to reach backend specifics.
"""
from offload.ledger.factory import open_ledger, redact
from offload.ledger.protocol import DelegationLedger, DispatchRow, LedgerError, LedgerRow

__all__ = ["DelegationLedger", "DispatchRow", "LedgerError", "LedgerRow", "open_ledger", "redact"]
