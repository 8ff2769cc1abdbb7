"""Facade: durable delivery (replay, claims) of ``offload.engine.delivery.Deliveries``, wired to
the ledger of the current ``$HERMES_HOME`` and kept importable by its hermes-era names.

``current_ledger()`` is one instance per process and store, opened by ``open_ledger`` on
``ledger.url`` (``offload.ledger.select``) or the home's state.db; the
policy numbers come from ``policy_source()``, which ``offload.default_runtime.engine`` points at its
patchable module constants when imported (until then, the defaults). ``owner_alive`` is read
through this module at call time, so tests may patch it here.
"""
from __future__ import annotations

import os
import threading
from typing import Callable

from offload.engine.delivery import Deliveries, is_this_process
from offload.engine.health import LedgerHealth
from offload.ledger import DelegationLedger
from offload.engine.liveness import owner_alive
from offload.engine.policy import DEFAULTS, Policy
from offload.ledger.select import ledger_key, open_selected_ledger
from offload.home import state_db_path

policy_source: Callable[[], Policy] = lambda: DEFAULTS  # noqa: E731 - replaced by offload.default_runtime.engine

_ledgers: dict[tuple[int, str], DelegationLedger] = {}
_ledgers_lock = threading.Lock()


def current_ledger() -> DelegationLedger:
    """The ledger of the current settings (``ledger.url``, else ``$HERMES_HOME/state.db``);
    one per process and store."""
    path = state_db_path()
    key = (os.getpid(), ledger_key(path))  # a forked child must not share its parent's connection
    with _ledgers_lock:
        ledger = _ledgers.get(key)
        if ledger is None:
            ledger = _ledgers[key] = open_selected_ledger(path)
        return ledger


health = LedgerHealth()
# ``is_me`` also asks the patchable liveness check, so a test that declares this process's
# owner dead (``owner_alive`` -> False) sees its rows replayed, as a later process would.
deliveries = Deliveries(ledger=lambda: current_ledger(), owner_alive=lambda pid, started: owner_alive(pid, started),
                        policy=lambda: policy_source(), health=health,
                        is_me=lambda pid, started: owner_alive(pid, started) and is_this_process(pid, started))


report_ledger_error = health.report
note_ledger_ok = health.ok


def maybe_prune(ledger: DelegationLedger, now: float | None = None) -> None:
    health.maybe_prune(ledger, policy_source, now)


# The hermes-era names of the delivery operations.
recover_abandoned_delegations = deliveries.recover_abandoned
restore_undelivered_completions = deliveries.restore
maybe_sweep_orphaned_completions = deliveries.maybe_sweep
claim_completion_delivery = deliveries.claim
complete_completion_delivery = deliveries.complete
release_completion_delivery = deliveries.release
defer_completion_delivery = deliveries.defer
drop_completion_delivery = deliveries.drop
record_delivery_progress = deliveries.record_progress
mark_completion_delivered = deliveries.mark_delivered
claim_event_delivery = deliveries.claim_event
complete_event_delivery = deliveries.complete_event
release_event_delivery = deliveries.release_event
get_durable_delegation = deliveries.get


def reset_for_tests() -> None:
    with _ledgers_lock:
        for ledger in _ledgers.values():
            ledger.close()
        _ledgers.clear()
    deliveries.reset()
