"""The engine's policy numbers, with their defaults in one place.

The engine and delivery never hold these as constants: they call a ``policy()`` callable on
every use, so an operator's config (applied by the app) or a test's patch takes effect at
once. ``tools/async_delegation.py`` builds the ``Policy`` from its module constants, which
the acceptance suite patches, and ``delegate_config`` takes its stall defaults from here.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    max_retained_completed: int = 50  # terminal in-memory records kept for listing
    stall_check_interval_s: float = 30.0
    stall_idle_s: float = 450.0  # no progress this long (not in a tool) = stalled
    stall_in_tool_s: float = 1200.0  # no progress this long inside a tool = stalled
    stall_grace_s: float = 120.0  # after the interrupt, wait this long, then report it
    max_delivery_attempts: int = 8
    max_replay_age_s: float = 48 * 3600.0
    claim_lease_s: float = 300.0
    settled_retention_s: float = 7 * 24 * 3600.0
    max_retained_settled: int = 1000  # delivered/dropped rows kept in the ledger
    prune_interval_s: float = 60.0
    orphan_sweep_interval_s: float = 30.0
    claim_check_interval_s: float = 2.0  # how often a consumer looks for claims of dead holders


DEFAULTS = Policy()
