"""Ledger failures seen by the engine: logged once per store and kind, never raised into a
worker; and the prune throttle (at most once per interval per store, off the dispatch path).

A ledger failure never stops work: the engine keeps running units and delivers in memory.
What the user must know is said once at error level (with the fix, from ``LedgerError``);
repeats go to debug until an operation on that store succeeds again.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from offload.ledger import DelegationLedger, LedgerError
from offload.engine.log import logger
from offload.engine.observers import notify
from offload.engine.policy import Policy


class LedgerHealth:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # workers, dispatchers and consumers report concurrently
        self._reported: set[tuple[str, str]] = set()  # (location, kind) already logged at error level
        self._last_prune: dict[str, float] = {}

    def report(self, ledger: DelegationLedger, op: str, exc: BaseException, consequence: str) -> None:
        """Log a ledger failure once per store and kind; repeats go to debug, not a log storm."""
        err = exc if isinstance(exc, LedgerError) else LedgerError(f"{type(exc).__name__}: {exc}")
        marker = (ledger.location, err.kind)
        notify("ledger_error", "", kind=err.kind, op=op)
        with self._lock:
            repeated = marker in self._reported
            self._reported.add(marker)
        if repeated:
            logger.debug("ledger %s failed again: %s", op, err)
            return
        logger.error("Delegation ledger: %s failed: %s. %s", op, err, consequence)

    def ok(self, ledger: DelegationLedger) -> None:
        """An operation succeeded: re-arm error reporting for this store."""
        if not self._reported:
            return
        with self._lock:
            self._reported.difference_update([m for m in self._reported if m[0] == ledger.location])

    def maybe_prune(self, ledger: DelegationLedger, policy: Callable[[], Policy], now: float | None = None) -> None:
        """Prune settled rows at most once per ``prune_interval_s`` per store."""
        now = time.time() if now is None else now
        limits = policy()
        if now - self._last_prune.get(ledger.location, 0.0) < limits.prune_interval_s:
            return
        self._last_prune[ledger.location] = now
        try:
            ledger.prune(now, limits.settled_retention_s, limits.max_retained_settled)
        except LedgerError as exc:
            self.report(ledger, "prune", exc, "Old delivered rows are kept until the next prune.")

    def reset(self) -> None:
        with self._lock:
            self._reported.clear()
        self._last_prune.clear()
