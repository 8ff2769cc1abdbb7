"""``DeliveryClaims``: the claim protocol of delivery, the half of ``Deliveries``
(``offload.engine.delivery``) a consumer calls per result -- claim a row, then complete it
once the turn that took it succeeded, release it (an attempt spent), defer it (the consumer,
not the result, failed: no attempt spent) or drop it -- and what each step tells observers.

Invariant: every step is one conditional ledger write under the claim id, so two consumers never
both hold a live claim and a completed row is never delivered again; a ledger failure is
reported once per kind (``LedgerHealth``) and answered with the step's safe default, never
raised; a row whose last attempt failed is dropped with why (it stays queryable).
"""
from __future__ import annotations

import os
import time
import uuid
from typing import Any, Callable

from offload.engine.events import is_interim
from offload.engine.health import LedgerHealth
from offload.engine.liveness import current_owner
from offload.engine.log import logger
from offload.engine.observers import notify
from offload.engine.policy import Policy
from offload.ledger import DelegationLedger, LedgerError

LedgerSource = Callable[[], DelegationLedger]


class DeliveryClaims:
    """The claim steps over ``ledger()``; ``Deliveries`` is one (it sets these three)."""

    ledger: LedgerSource
    policy: Callable[[], Policy]
    health: LedgerHealth

    def _guarded(self, op: str, default: Any, fn: Callable[[DelegationLedger], Any]) -> Any:
        ledger = self.ledger()
        try:
            outcome = fn(ledger)
        except LedgerError as exc:
            self.health.report(ledger, op, exc, "Delivery continues in memory.")
            return default
        self.health.ok(ledger)
        return outcome

    def claim(self, delegation_id: str, claim_id: str) -> bool:
        """Claim a row for delivery. True also when there is no row (nothing durable to guard)."""
        def claim(ledger: DelegationLedger) -> bool:
            got = ledger.claim_delivery(delegation_id, claim_id, time.time(), self.policy().claim_lease_s,
                                        holder=current_owner())
            return True if got is None else got
        return self._told(delegation_id, "claimed", self._guarded("claim", True, claim))

    def complete(self, delegation_id: str, claim_id: str) -> bool:
        return self._told(delegation_id, "delivered", self._guarded(
            "complete delivery", False, lambda l: l.complete_delivery(delegation_id, claim_id, time.time())))

    def release(self, delegation_id: str, claim_id: str, why: str = "") -> str:
        """Give a claim back (an attempt spent); ``why`` the attempt failed becomes the drop
        reason if it was the last one."""
        budget = self.policy().max_delivery_attempts
        state = self._guarded("release delivery", "", lambda l: l.release_delivery(
            delegation_id, claim_id, time.time(), budget, exhausted(budget, why or "delivering it failed")))
        self._told(delegation_id, "released", bool(state))
        if state == "dropped":
            out_of_attempts(delegation_id, budget, self.ledger)
        return state

    def defer(self, delegation_id: str, claim_id: str) -> bool:
        return self._guarded("defer delivery", False, lambda l: l.defer_delivery(delegation_id, claim_id, time.time()))

    def drop(self, delegation_id: str, claim_id: str | None = None, reason: str | None = None) -> bool:
        """Drop a pending result undelivered; ``reason`` is kept in the ledger for every host."""
        return self._told(delegation_id, "dropped", self._guarded(
            "drop delivery", False, lambda l: l.drop_delivery(delegation_id, claim_id, time.time(), reason)))

    def record_progress(self, delegation_id: str, claim_id: str, parts: int) -> bool:
        """The first ``parts`` parts of a split result were shown under this claim."""
        return self._guarded("record delivery progress", False, lambda l: l.record_progress(
            delegation_id, claim_id, parts, time.time()))

    def mark_delivered(self, delegation_id: str) -> bool:
        """Acknowledge unconditionally (no claim needed). True iff the row changed."""
        return self._told(delegation_id, "acknowledged", self._guarded(
            "acknowledge", False, lambda l: l.mark_delivered(delegation_id, time.time())))

    def claim_event(self, evt: dict[str, Any], consumer: str) -> str | None:
        """Claim id to pass to complete/release, ``""`` if no claim is needed, None if another
        consumer holds the event."""
        if not _claimable(evt):
            return ""
        claim_id = f"{consumer}:{os.getpid()}:{uuid.uuid4().hex}"
        return claim_id if self.claim(evt["delegation_id"], claim_id) else None

    def complete_event(self, evt: dict[str, Any], claim_id: str | None) -> bool:
        if not claim_id or not _claimable(evt):
            return False
        return self.complete(evt["delegation_id"], claim_id)

    def release_event(self, evt: dict[str, Any], claim_id: str | None, why: str = "") -> str:
        if not claim_id or not _claimable(evt):
            return ""
        return self.release(evt["delegation_id"], claim_id, why)

    def defer_event(self, evt: dict[str, Any], claim_id: str | None) -> bool:
        """Give a claim back without spending an attempt (the consumer, not the result, failed:
        its model endpoint is down)."""
        if not claim_id or not _claimable(evt):
            return False
        return self._told(evt["delegation_id"], "deferred", self.defer(evt["delegation_id"], claim_id))

    def _told(self, delegation_id: str, outcome: str, changed: Any) -> Any:
        return _told(delegation_id, outcome, changed, self.ledger)


def exhausted(budget: int, why: str) -> str:
    """The drop reason of a result whose last delivery attempt failed."""
    return f"{why} on the last of its {budget} delivery attempts"


def out_of_attempts(delegation_id: str, budget: int, ledger: LedgerSource | None = None) -> None:
    _told(delegation_id, "dropped", True, ledger)
    logger.warning("Delegation %s exhausted its %d delivery attempts and was dropped; the result remains "
                   "queryable with `offload inbox --all`.", delegation_id, budget)


def _told(delegation_id: str, outcome: str, changed: Any, ledger: LedgerSource | None = None) -> Any:
    """Tell observers about a delivery step that changed the row (``ledger``: the provider of the
    ledger it lives in, so an observer may read it); returns ``changed``."""
    if changed:
        notify("delivery", delegation_id, outcome=outcome, ledger=ledger)
    return changed


def _claimable(evt: dict[str, Any]) -> bool:
    return evt.get("type") == "async_delegation" and bool(evt.get("delegation_id")) and not is_interim(evt)
