"""Facade: the ledger interface moved to ``delegation.ledger`` (``protocol.py``); these names
stay importable here for code written against the hermes module layout."""
from delegation.ledger.protocol import DelegationLedger, DispatchRow, LedgerError, LedgerRow  # noqa: F401
