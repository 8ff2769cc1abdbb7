"""The owner side of cross-process control and visibility: one daemon thread per runtime,
alive only while its engine runs units, that carries out control requests other processes
and hosts left in the ledger (``offload.owner.control_requests``) and publishes its units' live
activity there (``offload.owner.activity``, at most every ``activity.INTERVAL_S``, only changes),
with the journal of what happened to them (``offload.owner.journal``: stalls, interrupts, the
children's transcripts) on the same cadence.

Every ``offload.Offload`` owns one (its engine starts it on each dispatch), so chat, run,
gateway and worker all honour ``offload stop`` and the dashboard's interrupt. On a ledger that
can notify (PostgreSQL: ``watch_control``, LISTEN/NOTIFY) the thread sleeps until a request
is made on any host, with a slow poll (``SHARED_POLL_S``) for a missed notification; on a
local ledger (SQLite) it polls every ``POLL_S``, one indexed read while nothing is requested.

The loop is a ``Loop`` (thread ``offload-owner-loop``) whose step acts on requests when due
(or at once when the listener wakes it), publishes activity when due, and asks for the next
step at the earlier of the two. A busy spell (from the first dispatch to the last unit's end)
opens its ledger and listener on its first step and closes them, withdrawing what it
published, when the engine has no live unit left.

Invariants: the loop starts when its engine dispatches (``start``) and exits when the
engine has no live unit (re-checked under the loop's start lock, which a dispatch takes after
its unit is live), so an idle process costs nothing; it never dies of a failed poll; it never
touches the dispatch path.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from offload.owner import activity
from offload.engine.loop import Clock, Loop
from offload.owner.journal import Journal

logger = logging.getLogger(__name__)

POLL_S = 0.5
SHARED_POLL_S = 5.0
LISTEN_WAIT_S = 2.0


class _Spell:
    """One busy spell: the ledger acted on, its control listener, and when each job is due."""

    def __init__(self, ledger: Any, listener: Any, now: float) -> None:
        self.ledger, self.listener = ledger, listener
        self.control_s = SHARED_POLL_S if listener is not None else POLL_S
        self.next_control_at = now
        self.next_activity_at = now + activity.INTERVAL_S  # nothing is old enough to publish before


class OwnerLoop:
    def __init__(self, *, engine: Any, ledger: Callable[[], Any], clock: Clock | None = None) -> None:
        """``engine``: what runs this runtime's units (a ``Delegations``: ``active_count()``,
        ``list()``, ``interrupt_one()``); ``ledger()``: the ledger to act on, asked at the start
        of each busy spell."""
        self.publisher = activity.Publisher()
        self.journal = Journal(owns=lambda did: did in engine.records)
        self._engine, self._ledger = engine, ledger
        self._spell: _Spell | None = None
        self._woken = False  # a control request was made: act at the next step, whatever is due
        self.loop = Loop("offload-owner-loop", self.step, POLL_S, clock=clock, immediate=True,
                         still_idle=lambda: self._units().active_count() == 0, what="owner loop step", log=logger)

    @property
    def thread(self) -> threading.Thread | None:
        return self.loop.thread

    def start(self) -> None:
        """A unit was dispatched: run the loop (if it is not running already)."""
        self.loop.start()

    def step(self, now: float) -> float | bool:
        """Act on what is due at monotonic ``now``; the seconds until the next step, or False
        (after closing the spell) once no unit is live."""
        units = self._units()
        spell = self._spell or self._open(now)
        if self._woken or now >= spell.next_control_at:
            self._woken = False
            self.tick(spell.ledger, units)
            spell.next_control_at = now + spell.control_s
        if now >= spell.next_activity_at:
            self.publish(spell.ledger, units.list())
            self.journal.flush(spell.ledger)
            spell.next_activity_at = now + activity.INTERVAL_S
        if units.active_count() == 0:
            self._close()
            return False
        return max(0.0, min(spell.next_control_at, spell.next_activity_at) - now)

    def stop(self) -> None:
        """Stop the loop and close its spell (withdraw what it published, stop listening); what
        the journal still holds is written (a unit may have finalized after the last spell)."""
        if self.loop.stop():
            self._close()
        self.flush_journal()

    def flush_journal(self) -> None:
        try:
            self.journal.flush(self._ledger())
        except Exception:  # a ledger that cannot be named at exit: the journal is decoration
            logger.debug("writing the journal failed", exc_info=True)

    def _units(self) -> Any:
        return self._engine

    def _open(self, now: float) -> _Spell:
        ledger = self._ledger()
        self._spell = _Spell(ledger, self._listen(ledger), now)
        return self._spell

    def _close(self) -> None:
        spell, self._spell = self._spell, None
        if spell is None:
            return
        self.publish(spell.ledger, [])  # nothing live here any more: withdraw what we published
        self.journal.flush(spell.ledger)  # the last units' final words
        if spell.listener is not None:
            spell.listener.stop()

    def _wake(self, _ids: Any) -> None:
        self._woken = True
        self.loop.wake()

    def publish(self, ledger: Any, items: list[dict[str, Any]]) -> None:
        try:
            self.publisher.publish(ledger, items, time.time())
        except Exception:  # activity is decoration; the next tick tries again
            logger.debug("publishing activity failed", exc_info=True)

    def _listen(self, ledger: Any) -> Any:
        watch = getattr(ledger, "watch_control", None)
        if watch is None:
            return None
        try:
            listener = watch(self._wake)
        except Exception:  # a server that is down: poll until it is back
            logger.debug("cannot listen for control requests; polling", exc_info=True)
            return None
        listener.listening.wait(LISTEN_WAIT_S)  # requests made before this are found by the first tick
        return listener

    @staticmethod
    def tick(ledger: Any, engine: Any, now: float | None = None) -> None:
        from offload.owner import control_requests

        try:
            control_requests.act_on_requests(engine, ledger, time.time() if now is None else now)
        except Exception:  # the loop outlives a bad request or an unreachable ledger
            logger.debug("acting on control requests failed", exc_info=True)

