"""Leased ownership across hosts, each "host" a separate process with its own host id.

- An owner SIGKILLed on host A mid-fan-out is recovered by host B only once its lease has
  expired, with the finished children's real results and the rest ``unknown``.
- On the owner's own host the pid check recovers it at once (no lease wait).
- An owner paused (SIGSTOP) past its lease and then resumed cannot overwrite the recovery:
  its child record and terminal write are refused (fencing), its result is delivered in memory
  only, and the recovered row stands.
"""
from __future__ import annotations

import signal
import time

import pytest

from tests.postgres.conftest import LEASE_S, Host
from tools import async_delegation_delivery as delivery

pytestmark = pytest.mark.timeout(90)


def start_owner(hosts, tmp_path, url: str, host_id: str, *goals: str) -> tuple[Host, str]:
    owner = Host(tmp_path, host_id, url, "host_owner.py", *goals)
    hosts.append(owner)
    return owner, owner.wait_for("D ").split()[1]


def wait_recorded(owner: Host, delegation_id: str, count: int = 1) -> None:
    """Until ``count`` of the unit's children were recorded: an ``ok`` child may finish (its
    ``R`` line) before ``delegate_task`` returns (``D``), so lines already read count too."""
    while sum(line.startswith(f"R {delegation_id} ") for line in owner.lines) < count:
        owner.wait_for(f"R {delegation_id} ")


def wait_lease_expired(ledger, delegation_id: str) -> float:
    """Wait (on the database clock) until the row's owner lease is no longer live; seconds waited."""
    started = time.monotonic()
    while ledger.get(delegation_id).extra["lease_live"]:
        assert time.monotonic() - started < LEASE_S * 4, "the lease never expired"
        time.sleep(0.05)
    return time.monotonic() - started


def by_index(row) -> dict[int, dict]:
    return {r["task_index"]: r for r in row.result["results"]}


def test_a_killed_owner_on_another_host_is_recovered_after_its_lease_with_real_results(
        hosts, tmp_path, pg_schema, host_b):
    owner, did = start_owner(hosts, tmp_path, pg_schema.url, "host-a",
                              "ok task 0", "ok task 1", "hang task 2", "hang task 3")
    wait_recorded(owner, did, 2)
    owner.signal(signal.SIGKILL)
    killed_at = time.monotonic()

    assert delivery.recover_abandoned_delegations() == 0  # lease live on host-a: not ours to judge by pid
    assert host_b.get(did).state == "running"

    wait_lease_expired(host_b, did)
    assert delivery.recover_abandoned_delegations() == 1
    recovery_s = time.monotonic() - killed_at

    row = host_b.get(did)
    assert (row.state, row.delivery_state) == ("unknown", "pending")
    results = by_index(row)
    assert [results[i]["summary"] for i in (0, 1)] == ["real:ok task 0", "real:ok task 1"]
    assert [results[i]["status"] for i in (2, 3)] == ["unknown", "unknown"]
    assert recovery_s <= LEASE_S + 2, f"recovery took {recovery_s:.1f}s with a {LEASE_S}s lease"
    assert delivery.recover_abandoned_delegations() == 0  # exactly once


def test_on_the_owners_own_host_a_dead_pid_is_recovered_without_waiting_for_the_lease(
        hosts, tmp_path, pg_schema, host_b, monkeypatch):
    owner, did = start_owner(hosts, tmp_path, pg_schema.url, "host-b", "ok task 0", "hang task 1")
    wait_recorded(owner, did)
    owner.signal(signal.SIGKILL)
    owner.proc.wait()

    assert host_b.get(did).extra["lease_live"]
    assert delivery.recover_abandoned_delegations() == 1
    assert by_index(host_b.get(did))[0]["summary"] == "real:ok task 0"


def test_a_paused_owner_whose_lease_expired_cannot_overwrite_the_recovery(hosts, tmp_path, pg_schema, host_b):
    owner, did = start_owner(hosts, tmp_path, pg_schema.url, "host-a", "ok task 0", "gate task 1")
    wait_recorded(owner, did)
    owner.signal(signal.SIGSTOP)
    wait_lease_expired(host_b, did)
    assert delivery.recover_abandoned_delegations() == 1
    recovered = host_b.get(did)

    (owner.home / "go").touch()  # the gated child finishes as soon as the owner runs again
    owner.signal(signal.SIGCONT)
    assert owner.wait_for(f"X {did} ") == f"X {did} 1"  # its child record is refused ...
    assert owner.wait_for(f"E {did} ") == f"E {did} completed"  # ... its result still reaches its own queue

    after = host_b.get(did)
    assert (after.state, after.result, after.event) == ("unknown", recovered.result, recovered.event)
    assert by_index(after)[1]["status"] == "unknown"
    assert "R " + did + " 1" not in owner.lines
    assert "was revoked" in owner.stderr.read_text() or "fenced" in owner.stderr.read_text()
