"""``Deliveries``: the durable side of delivery — replay after a restart, the orphan sweep,
and the claim protocol (its steps in ``offload.engine.claims``) — over whatever ledger
``ledger()`` returns.

Delivery is at-least-once and deduplicated by delegation id: a consumer claims a row with a
lease, injects the result, and completes the claim only after the new turn is stored. Two
consumers never both hold a live claim. A claim records its holder (pid and start time; on a
shared ledger its host and lease), so a consumer that dies mid-delivery leaves the row
claimable again as soon as any consumer sees it dead (``claim_check_interval_s``), and after
the claim lease at the latest when its death cannot be told.

Who delivers a result is decided by its claim, not by who ran or dispatched it: every consumer
is offered every deliverable row, and a consumer of the row's session claims it. The one row
not offered is one this very process finished and nobody has claimed yet: its event is on this
process's bus already. "This process" means this ``Deliveries``' runtime (``on_our_bus``): a
second ``Offload`` on the same home in one process is offered what a first one (closed, or
still open but done consuming) left pending, as another process would be. So a result run by an ``offload worker`` (which never delivers), or by
an owner that is alive but consumes nothing, reaches whichever consumer of its session is live.
Replay never creates a ledger, runs only when a consumer asks (never at import), recovers rows
whose owner died, and drops rows past the replay age cap or the attempt budget (they stay
queryable). Ledger failures are logged once per kind (``LedgerHealth``), never raised.
Policy numbers come from ``policy()`` on every use.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from offload.engine.claims import DeliveryClaims, exhausted, out_of_attempts
from offload.engine.health import LedgerHealth
from offload.engine.liveness import current_owner
from offload.ledger import DelegationLedger, LedgerError, LedgerRow
from offload.engine.log import logger
from offload.engine.observers import notify
from offload.engine.policy import DEFAULTS, Policy
from offload.engine.recovery import git_state_hint, recovered_event

OwnerAlive = Callable[[int | None, int | None], bool]


def is_this_process(pid: int | None, started_at: int | None) -> bool:
    """Whether a row's owner (pid, start-time fingerprint) is the process running this code."""
    own_pid, own_started = current_owner()
    return pid == own_pid and (started_at is None or own_started is None or started_at == own_started)


class Deliveries(DeliveryClaims):
    def __init__(self, *, ledger: Callable[[], DelegationLedger], owner_alive: OwnerAlive,
                 policy: Callable[[], Policy] = lambda: DEFAULTS, health: LedgerHealth | None = None,
                 is_me: OwnerAlive = is_this_process,
                 on_our_bus: Callable[[str], bool] = lambda delegation_id: True) -> None:
        """``owner_alive(pid, started)``: the local liveness check, for recovery and for claim
        holders; ``is_me``: whether an owner is this process; ``on_our_bus(delegation_id)``:
        whether this runtime's own engine published that unit's event on the bus consumers
        here read (a unit another runtime of this process ran is not)."""
        self.ledger, self.owner_alive, self.policy, self.is_me = ledger, owner_alive, policy, is_me
        self.on_our_bus = on_our_bus
        self.health = health or LedgerHealth()
        self._last_sweep: dict[str, float] = {}
        self._last_claim_check: dict[str, float] = {}
        self._offered: dict[tuple[str, str], float] = {}  # (ledger location, delegation id) -> last offer
        self._offer_lock = threading.Lock()  # a listener thread and a scan may look at one row at once
        self._listened: dict[tuple[str, str], queue.Queue] = {}  # the queue a listener/sweep last offered it to
        # ``resume(row) -> (queued task | None, why not | None)``: a dead owner's unit this
        # process hands back to the queue to be resumed (``offload.subagents.resume``), asked
        # only by a consumer's restore and sweeps; an empty task: resumable, but by another
        # process (left running); None: every abandoned row is settled.
        self.resume: Callable[[LedgerRow], tuple[dict[str, Any] | None, str | None]] | None = None
        self.requeued = 0  # units handed back to the queue to be resumed, by this instance so far

    # -- restart: recovery and replay ---------------------------------------------------------
    def recover_abandoned(self, now: float | None = None, *, resuming: bool = False) -> int:
        """Settle ``running`` rows whose owner process died as ``unknown``; returns how many.
        ``resuming`` (a long-lived process): a row ``self.resume`` accepts goes back to the
        queue to be resumed instead; a command that only looks leaves such a row running, for
        the next long-lived process on the ledger."""
        return len(self._recover(time.time() if now is None else now, resuming))

    def _recover(self, now: float, resuming: bool = False) -> list[str]:
        """``recover_abandoned``, returning the ids it settled."""
        ledger = self.ledger()
        if not ledger.exists():
            return []
        hints: dict[str, str | None] = {}
        settled: list[str] = []
        for row in ledger.running_rows():
            if not ledger.is_abandoned(row, self.owner_alive):
                continue
            queued, why_not = self.resume(row) if self.resume is not None else (None, None)
            if queued is not None:
                if resuming and queued and ledger.requeue_for_resume(row, queued, now):
                    self.requeued += 1
                    notify("resumable", row.delegation_id, row=row)
                    logger.warning("Delegation %s lost its owner (pid %s) mid-run; queued to resume from its "
                                   "children's last steps", row.delegation_id, row.owner_pid)
                continue
            cwd = (row.task or {}).get("owner_cwd")
            if cwd not in hints:
                hints[cwd] = git_state_hint(cwd)
            event, result = recovered_event(row, now, hints[cwd])
            if why_not:
                event["error"] = f"{event['error']} Not resumed: {why_not}."
            if ledger.settle_abandoned(row.delegation_id, event, result, now):
                settled.append(row.delegation_id)
                notify("recovered", row.delegation_id, row=row, event=event, ledger=self.ledger)
                logger.warning("Recovered delegation %s whose owner (pid %s) exited mid-run: %s",
                               row.delegation_id, row.owner_pid, event["error"])
        return settled

    def restore(self, target_queue: queue.Queue, now: float | None = None) -> int:
        """Recover abandoned rows, then put every deliverable pending event on ``target_queue``.

        Replayed events are stamped ``restored=True`` (in memory only), so a drain without an
        ownership filter leaves them for a consumer that can prove it owns them; those offered
        later, as another process settles them (a worker, a recovered owner), are also stamped
        ``settled_elsewhere=True``, so a view does not call them replayed.
        """
        return self._offer_orphans(target_queue, time.time() if now is None else now, only_new=False)

    def maybe_sweep(self, target_queue: queue.Queue, now: float | None = None) -> int:
        """While running, offer rows that became deliverable here since the last offer: their
        owner died after our restore (or, on a shared ledger, its lease expired), or a consumer
        died holding a claim. Both are looked for every ``claim_check_interval_s`` (two narrow
        reads: the claimed rows and the running ones), everything else at most once per
        ``orphan_sweep_interval_s`` per store; never raises."""
        now = time.time() if now is None else now
        try:
            policy, key = self.policy(), self.ledger().location
            offered = 0
            if now - self._last_claim_check.get(key, 0.0) >= policy.claim_check_interval_s:
                self._last_claim_check[key] = now
                offered += self._offer_released(target_queue, now)
                offered += self._offer_recovered(target_queue, now)
            if now - self._last_sweep.get(key, 0.0) >= policy.orphan_sweep_interval_s:
                self._last_sweep[key] = now
                offered += self._offer_orphans(target_queue, now, only_new=True)
            return offered
        except Exception:
            logger.debug("orphan sweep failed", exc_info=True)
            return 0

    def _offer_released(self, target_queue: queue.Queue, now: float) -> int:
        """Release the claims whose holder is known dead and offer their rows here."""
        ledger = self.ledger()
        if not ledger.exists():
            return 0
        try:
            dead = [row for row in ledger.claimed_rows() if ledger.claim_abandoned(row, self.owner_alive)]
            return self._offer(ledger, target_queue, dead, now, only_new=True)
        except LedgerError as exc:
            self.health.report(ledger, "releasing the claims of dead consumers", exc,
                               "They are released at the next check, or when their claim lease runs out.")
            return 0

    def _offer_recovered(self, target_queue: queue.Queue, now: float) -> int:
        """Recover the running rows whose owner is gone (its process dead, or its lease expired
        on another host) and offer what they became: recovery within the lease, not at the
        next orphan sweep. The trigger a takeover of unfinished units hangs on, too."""
        ledger = self.ledger()
        try:
            recovered = self._recover(now, resuming=True)
            rows = [row for row in (ledger.get(did) for did in recovered) if row is not None]
            return self._offer(ledger, target_queue, [r for r in rows if r.delivery_state == "pending"], now,
                               only_new=True)
        except LedgerError as exc:
            self.health.report(ledger, "recovering the units of owners that died", exc,
                               "They are recovered at the next check, or by the next start.")
            return 0

    def _offer_orphans(self, target_queue: queue.Queue, now: float, *, only_new: bool) -> int:
        ledger = self.ledger()
        if not only_new:
            self._watch(ledger, target_queue)  # listen first: a row settled during the scan still wakes us
        if not ledger.exists():
            return 0  # replay never creates a ledger
        offered = 0
        try:
            self.recover_abandoned(now, resuming=True)
            pending = ledger.pending_rows()
            offered = self._offer(ledger, target_queue, pending, now, only_new)
            self._forget_settled(ledger, target_queue, {row.delegation_id for row in pending}, now)
        except LedgerError as exc:
            # An unreadable or locked ledger must not take the consumer down with it; what it
            # holds stays there and is replayed by the first start after it is repaired.
            self.health.report(ledger, "restoring undelivered completions", exc,
                               "Undelivered results recorded there are replayed once it is readable again.")
        return offered

    def _forget_settled(self, ledger: DelegationLedger, target_queue: queue.Queue, pending: set[str],
                        now: float) -> None:
        """Drop what was offered here before ``now`` and is no longer pending (delivered or
        dropped by someone): a replayed event of another session waits on our queue for nobody,
        so without this a long-lived consumer would keep every such result of every host."""
        with self._offer_lock:
            stale = {did for (location, did), at in self._offered.items()
                     if location == ledger.location and did not in pending and at < now}
            for did in stale:
                self._offered.pop((ledger.location, did), None)
                self._listened.pop((ledger.location, did), None)
        take_all = getattr(target_queue, "take_all", None)  # an IndexedQueue; a plain queue keeps them
        if stale and take_all is not None:
            take_all(lambda evt: bool(evt.get("restored")) and evt.get("delegation_id") in stale)

    def _offer(self, ledger: DelegationLedger, target_queue: queue.Queue, rows: list[LedgerRow], now: float,
               only_new: bool) -> int:
        offered = 0
        with self._offer_lock:
            for row in rows:
                key = (ledger.location, row.delegation_id)
                if not only_new and self._listened.get(key) is target_queue and self._offered.get(key, 0.0) > now:
                    continue  # the listener put it on this very queue while this scan ran
                if not self._should_offer(ledger, row, now, only_new):
                    continue
                if only_new:
                    self._listened[key] = target_queue
                event = dict(row.event or {})
                event["restored"] = True
                if only_new:  # settled by another live process (a worker) or a recovered owner, not replayed
                    event["settled_elsewhere"] = True
                target_queue.put(event)
                self._offered[key] = now
                offered += 1
        return offered

    def _watch(self, ledger: DelegationLedger, target_queue: queue.Queue) -> None:
        """On a ledger shared across hosts, offer rows settled anywhere as they settle
        (PostgreSQL LISTEN/NOTIFY) instead of at the next orphan sweep."""
        if getattr(type(ledger), "watch", None) is None:
            return

        def on_rows(rows: list[LedgerRow] | None) -> None:
            now = time.time()
            try:
                if rows is None:  # the listener reconnected: it may have missed some
                    self._offer_orphans(target_queue, now, only_new=True)
                else:
                    self._offer(ledger, target_queue, rows, now, only_new=True)
            except LedgerError as exc:
                self.health.report(ledger, "offering a notified result", exc, "The orphan sweep offers it later.")
        try:
            ledger.watch(on_rows)  # type: ignore[attr-defined]
        except LedgerError as exc:
            self.health.report(ledger, "listening for results of other hosts", exc,
                               "Their results arrive with the orphan sweep instead.")

    def _should_offer(self, ledger: DelegationLedger, row: LedgerRow, now: float, only_new: bool) -> bool:
        if row.delivery_claimed_at is None and ledger.owned_here(row, self.is_me) and self.on_our_bus(row.delegation_id):
            return False  # this runtime finished it and nobody claimed it: its event is on our bus
        if row.delivery_claim is not None and (row.delivery_claimed_at or 0.0) >= now - self.policy().claim_lease_s:
            # Its holder is delivering it; offered again once that claim lapses or its holder dies.
            return ledger.claim_abandoned(row, self.owner_alive) and self._release_dead_claim(ledger, row, now)
        last_offer = self._offered.get((ledger.location, row.delegation_id))
        if only_new and last_offer is not None and (row.delivery_claimed_at or 0.0) <= last_offer:
            return False  # still on our queue, or with the consumer that took it from there
        return self._still_deliverable(ledger, row, now)

    def _release_dead_claim(self, ledger: DelegationLedger, row: LedgerRow, now: float) -> bool:
        """Release the claim of a holder known dead (its attempt counts: a result that kills its
        consumers runs out of attempts); True if the row is pending and free now."""
        budget = self.policy().max_delivery_attempts
        state = ledger.release_delivery(row.delegation_id, row.delivery_claim or "", now, budget,
                                        exhausted(budget, "its consumer died while delivering it"))
        if state:
            self._told(row.delegation_id, "released", True)
            logger.warning("Released the delivery claim on %s: its holder (pid %s) is gone; delivering it again.",
                           row.delegation_id, row.delivery_claim_pid)
        if state == "dropped":
            out_of_attempts(row.delegation_id, budget, self.ledger)
        return state == "pending"

    def _still_deliverable(self, ledger: DelegationLedger, row: LedgerRow, now: float) -> bool:
        policy = self.policy()
        age_s = now - (row.completed_at or row.dispatched_at)
        if age_s > policy.max_replay_age_s:
            reason = f"{age_s / 3600:.1f}h old (cap {policy.max_replay_age_s / 3600:.1f}h)"
        elif row.delivery_attempts >= policy.max_delivery_attempts:
            reason = f"it exhausted its {policy.max_delivery_attempts} delivery attempts"
        elif not row.event:
            reason = "its stored event is unreadable"
        else:
            return True
        ledger.drop_delivery(row.delegation_id, None, now, f"not replayed: {reason}")
        logger.warning("Not replaying delegation %s: %s; dropped (the result remains queryable with "
                       "`offload inbox --all`).", row.delegation_id, reason)
        return False

    # -- queries ----------------------------------------------------------------------------------
    def get(self, delegation_id: str) -> dict[str, Any] | None:
        if not self.ledger().exists():
            return None
        row = self._guarded("read", None, lambda l: l.get(delegation_id))
        if row is None:
            return None
        return {"delegation_id": row.delegation_id, "origin_session": row.origin_session, "state": row.state,
                "dispatched_at": row.dispatched_at, "completed_at": row.completed_at, "result": row.result,
                "event": row.event, "delivery_state": row.delivery_state, "delivery_attempts": row.delivery_attempts,
                "origin_session_id": row.origin_session_id, "parent_session_id": row.parent_session_id,
                "delivery_progress": row.delivery_progress, "drop_reason": row.drop_reason,
                "origin": row.origin.to_json()}

    def reset(self) -> None:
        self.health.reset()
        self._last_sweep.clear()
        self._last_claim_check.clear()
        self._offered.clear()
        self._listened.clear()
