"""The running orphan sweep: results that become deliverable here after our restore."""
from __future__ import annotations

import queue
import time

import tools.async_delegation as ad
import tools.async_delegation_delivery as delivery


def offered_ids(q: queue.Queue) -> list[str]:
    ids = []
    while not q.empty():
        ids.append(q.get_nowait()["delegation_id"])
    return ids


def test_a_row_orphaned_after_restore_is_offered_once(seed):
    q: queue.Queue = queue.Queue()
    now = time.time()
    assert ad.restore_undelivered_completions(q, now=now) == 0  # nothing yet (creates nothing either)
    seed("deleg_late", completed_at=now - 1)  # its owner died after we restored
    assert delivery.maybe_sweep_orphaned_completions(q, now=now) == 1
    assert offered_ids(q) == ["deleg_late"]
    later = now + ad._ORPHAN_SWEEP_INTERVAL_S + 1
    assert delivery.maybe_sweep_orphaned_completions(q, now=later) == 0  # still ours to deliver: no copies


def test_sweeps_are_rate_limited(seed):
    q: queue.Queue = queue.Queue()
    now = time.time()
    assert delivery.maybe_sweep_orphaned_completions(q, now=now) == 0
    seed("deleg_soon", completed_at=now - 1)
    assert delivery.maybe_sweep_orphaned_completions(q, now=now + 1) == 0
    assert delivery.maybe_sweep_orphaned_completions(q, now=now + ad._ORPHAN_SWEEP_INTERVAL_S + 1) == 1


def test_a_dead_consumers_claim_is_offered_again_after_the_lease(seed):
    q: queue.Queue = queue.Queue()
    now = time.time()
    seed("deleg_claimed", completed_at=now - 1)
    assert ad.restore_undelivered_completions(q, now=now) == 1
    (evt,) = [q.get_nowait()]
    assert ad.claim_event_delivery(evt, "consumer-that-dies")  # ...and never completes
    step = ad._ORPHAN_SWEEP_INTERVAL_S + 1
    assert delivery.maybe_sweep_orphaned_completions(q, now=now + step) == 0  # claim still live
    after_lease = time.time() + ad._CLAIM_LEASE_S + step
    assert delivery.maybe_sweep_orphaned_completions(q, now=after_lease) == 1
    assert offered_ids(q) == ["deleg_claimed"]


def test_a_running_consumer_releases_a_dead_holders_claim_within_the_claim_check(seed, dead_pid):
    q: queue.Queue = queue.Queue()
    now = time.time()
    seed("deleg_held", completed_at=now - 1)
    assert ad.restore_undelivered_completions(q, now=now) == 1
    q.get_nowait()  # taken by a consumer that then died holding its claim (the dead pid)
    ledger = delivery.current_ledger()
    assert ledger.claim_delivery("deleg_held", "gateway:dead", now + 1, ad._CLAIM_LEASE_S, holder=(dead_pid, None))

    assert delivery.maybe_sweep_orphaned_completions(q, now=now + ad._CLAIM_CHECK_INTERVAL_S + 2) == 1
    assert offered_ids(q) == ["deleg_held"]  # seconds later, not after the 5-minute claim lease
    row = ledger.get("deleg_held")
    assert (row.delivery_state, row.delivery_claim, row.delivery_attempts) == ("pending", None, 1)


def test_a_claim_whose_holder_cannot_be_told_holds_until_the_claim_lease(seed):
    q: queue.Queue = queue.Queue()
    now = time.time()
    seed("deleg_old_claim", completed_at=now - 1)
    ledger = delivery.current_ledger()
    assert ledger.claim_delivery("deleg_old_claim", "claimed-by-an-older-version", now, ad._CLAIM_LEASE_S)

    assert ad.restore_undelivered_completions(q, now=now + 1) == 0
    assert delivery.maybe_sweep_orphaned_completions(q, now=now + ad._ORPHAN_SWEEP_INTERVAL_S + 2) == 0
    assert delivery.maybe_sweep_orphaned_completions(q, now=now + ad._CLAIM_LEASE_S + 1) == 1


def test_a_replayed_result_delivered_elsewhere_leaves_the_queue_at_the_next_sweep(seed):
    from offload.engine.bus_queue import IndexedQueue

    q = IndexedQueue()
    now = time.time()
    seed("deleg_theirs", completed_at=now - 1, session_key="another-session")
    seed("deleg_still", completed_at=now - 1, session_key="another-session")
    assert ad.restore_undelivered_completions(q, now=now) == 2  # nobody here consumes that session
    assert delivery.mark_completion_delivered("deleg_theirs")  # its own consumer delivered it

    later = now + ad._ORPHAN_SWEEP_INTERVAL_S + 1
    assert delivery.maybe_sweep_orphaned_completions(q, now=later) == 0
    assert offered_ids(q) == ["deleg_still"]  # what is still pending stays; nothing piles up


def test_the_bus_runs_the_sweep_on_drain(seed, notifications_stub, monkeypatch):
    from tools.process_registry import CompletionBus
    registry = CompletionBus()
    assert registry.drain_notifications() == []  # restore + first sweep: nothing there yet
    seed("deleg_orphan", completed_at=time.time() - 1, session_key="s1")
    monkeypatch.setattr(ad, "_ORPHAN_SWEEP_INTERVAL_S", 0.0)
    assert [evt["delegation_id"] for evt, _ in registry.drain_notifications(session_key="s1")] == ["deleg_orphan"]
