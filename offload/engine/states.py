"""The states of a delegation unit, one source for every layer that asks "is it live?".

A unit goes ``running`` → (``stalling`` →) ``finalizing`` → a terminal state
(``completed``/``error``/``stalled``/``interrupted``…); after a crash its ledger row is settled
``unknown``. Only ``running`` and ``stalling`` hold a slot and can be interrupted.
"""
from __future__ import annotations

ACTIVE_STATES = ("running", "stalling")  # holds a slot; can be interrupted or stall
LIVE_STATES = frozenset({*ACTIVE_STATES, "finalizing"})  # not yet reported
DONE_STATES = frozenset({"completed", "success"})  # a child or unit that succeeded
FAILED_STATES = frozenset({"failed", "error", "rejected", "timeout"})  # a child that failed (not one stopped)
