"""The values two of the ledger's reads speak: ``Browse``, the query of one page of the history
(``browse.py`` renders it to SQL), and ``UnitCounts``, the units counted by state (``tally.py``
runs the statements). The ledger protocol names both in its signatures, and the modules that
compute them need the protocol's rows, so the values live here, below both.
Invariant: plain frozen data; nothing here imports another module of the ledger.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

PAGE_ROWS = 50
Key = tuple[str, str]  # (state, delivery_state) of a row


@dataclass(frozen=True)
class Browse:
    """One page of the history: filters (empty: any) and where the page starts.

    ``states``: unit states stored on the row; ``session``: any of its session ids; ``owner``: the
    owner's pid, or its host (``DelegationLedger.owner_host``); ``model``: the task's model; ``text``: words
    of the goal(s); ``since``: dispatched at or after; ``finished_since``: finished at or after;
    ``before``: the keyset of the last row of the previous page."""

    states: tuple[str, ...] = ()
    delivery_state: str = ""
    session: str = ""
    owner: str = ""
    model: str = ""
    text: str = ""
    since: float | None = None
    finished_since: float | None = None
    before: tuple[float, str] | None = None
    limit: int = PAGE_ROWS



@dataclass(frozen=True)
class UnitCounts:
    """``rows``: rows in the ledger now by (state, delivery_state); ``pruned``: rows prune
    deleted over the ledger's life, by the same key; ``delivery_attempts``: summed over ``rows``;
    ``recent``: of ``rows``, those that finished at or after the ``since`` asked for (keys with
    none left out; empty when no ``since`` was asked); ``recent_stops``: of those, the ones not
    completed that stopped early, by (state, the event's ``stop_reason``: stall | user)."""

    rows: dict[Key, int] = field(default_factory=dict)
    pruned: dict[Key, int] = field(default_factory=dict)
    delivery_attempts: int = 0
    recent: dict[Key, int] = field(default_factory=dict)
    recent_stops: dict[Key, int] = field(default_factory=dict)  # (state, stop_reason) of ``recent``'s early stops

    def ever(self) -> Counter[Key]:
        """Every unit the ledger has held, by its state now (or when it was pruned)."""
        return Counter(self.rows) + Counter(self.pruned)
