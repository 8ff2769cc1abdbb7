"""``offload worker`` resumes a dead owner's unit within the lease plus 2 s (issue 44): its
recovery pass runs every ``claim_check_interval_s`` whatever the lease (it ran every half lease:
30 s with the default 60 s lease), and a pass that hands a unit back to the queue wakes the
worker to claim it at once instead of at its next wake-up. Driven with a fake monotonic clock:
what is checked is when the passes run and what they wake, not how long anything takes."""
from __future__ import annotations

import queue

import pytest

from offload.owner import worker as worker_mod
from offload.config import OffloadConfig
from offload.runtime import Offload

pytestmark = pytest.mark.timeout(60)


def test_recovery_runs_at_the_claim_check_cadence_and_a_requeue_wakes_the_claim(pg_schema, tmp_path, monkeypatch):
    cfg = OffloadConfig.model_validate({"model": "m", "base_url": "http://127.0.0.1:9/v1",
                                        "ledger": {"url": pg_schema.url, "lease_seconds": 60, "heartbeat_seconds": 10}})
    now = [100.0]
    monkeypatch.setattr(worker_mod.time, "monotonic", lambda: now[0])
    with Offload(cfg, home=tmp_path / "home") as off:
        worker = worker_mod.Worker(off, 1, lambda line: None)
        passes: list[float] = []

        def recover(*, resuming: bool) -> int:
            assert resuming  # a worker is long-lived: it resumes what it can
            passes.append(now[0])
            if len(passes) == 2:  # the dead owner's lease ran out between the two passes
                off.deliveries.requeued += 1
            return 0
        monkeypatch.setattr(off.deliveries, "recover_abandoned", recover)
        interval = off.current_policy().claim_check_interval_s
        for at in (100.0, 100.0 + interval / 2, 100.0 + interval):
            now[0] = at
            worker._recover_when_due()
        assert passes == [100.0, 100.0 + interval]  # every claim check, not every half lease (30 s)
        assert worker.bus.get_nowait() == worker_mod.WAKE  # the requeued unit is claimed at once
        with pytest.raises(queue.Empty):
            worker.bus.get_nowait()


def test_the_interval_is_at_most_half_the_lease_and_at_least_a_second():
    policy = type("P", (), {"claim_check_interval_s": 2.0})()
    lease = lambda s: type("L", (), {"lease_seconds": s})()  # noqa: E731
    assert worker_mod.recovery_interval_s(policy, lease(60)) == 2.0
    assert worker_mod.recovery_interval_s(policy, lease(3)) == 1.5
    assert worker_mod.recovery_interval_s(policy, lease(1)) == 1.0
