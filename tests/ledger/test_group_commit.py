"""Group commit in the SQLite ledger: concurrent writes share one transaction, a lone write
commits at once, a failing write fails alone, and no caller returns before its commit.

Batches are formed deterministically: the first writer (the leader) is held inside its commit
on an event while the others queue behind it, so the next commit must hold all of them.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from offload.ledger import LedgerError
from offload.ledger.sqlite import SqliteLedger
from tests.ledger.test_sqlite import T0, row

pytestmark = pytest.mark.timeout(60)
FOLLOWERS = 7


def committed_ids(db: Path) -> set[str]:
    """What another connection sees: only committed rows."""
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT delegation_id FROM async_delegations")}
    finally:
        conn.close()


def wait_for(predicate, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)


class HeldLeader:
    """Holds the first commit of ``ledger`` until ``release()``; records every batch and COMMIT."""

    def __init__(self, ledger: SqliteLedger) -> None:
        self.ledger, self.entered, self.gate = ledger, threading.Event(), threading.Event()
        self.batch_sizes: list[int] = []
        self.commits: list[int] = []  # batch size of each shared COMMIT
        real_batch, real_commit = ledger._commit_batch, ledger._commit_transaction

        def commit_batch(batch):
            self.batch_sizes.append(len(batch))
            if len(self.batch_sizes) == 1:
                self.entered.set()
                assert self.gate.wait(30)
            real_batch(batch)

        def commit_transaction(conn, batch):
            self.commits.append(len(batch))
            real_commit(conn, batch)

        ledger._commit_batch = commit_batch
        ledger._commit_transaction = commit_transaction

    def run(self, writes) -> tuple[list[threading.Thread], dict[int, object]]:
        """Start the leader (writes[0]), queue the rest behind it, release; return outcomes."""
        outcomes: dict[int, object] = {}

        def call(i, write):
            try:
                outcomes[i] = write()
            except Exception as exc:  # noqa: BLE001 - the outcome under test
                outcomes[i] = exc

        threads = [threading.Thread(target=call, args=(i, w)) for i, w in enumerate(writes)]
        threads[0].start()
        assert self.entered.wait(30)
        for t in threads[1:]:
            t.start()
        wait_for(lambda: len(self.ledger._group._queue) == len(writes) - 1)
        assert not outcomes, "a follower returned before any commit ran"
        self.gate.set()
        for t in threads:
            t.join(30)
        return threads, outcomes


@pytest.fixture
def ledger(tmp_path):
    instance = SqliteLedger(tmp_path / "state.db")
    instance.persist_dispatch(row("deleg_base"), T0)  # the file exists; a lone write
    yield instance
    instance.close()


def test_a_lone_write_commits_at_once_without_a_shared_transaction(ledger, tmp_path):
    held = HeldLeader(ledger)
    held.gate.set()
    ledger.persist_dispatch(row("deleg_lone"), T0)
    assert "deleg_lone" in committed_ids(tmp_path / "state.db")  # committed when the call returned
    assert held.batch_sizes == [1] and held.commits == []  # autocommit, as before group commit


def test_writes_queued_behind_a_commit_share_the_next_one(ledger, tmp_path):
    ledger.persist_dispatch(row("deleg_kid"), T0)
    held = HeldLeader(ledger)
    writes = [lambda: ledger.persist_dispatch(row("deleg_lead"), T0)]
    writes += [lambda i=i: ledger.persist_dispatch(row(f"deleg_f{i}"), T0) for i in range(FOLLOWERS - 2)]
    writes += [lambda: ledger.record_unit_child("deleg_kid", {"task_index": 0, "status": "completed"}, T0 + 1),
               lambda: ledger.mark_delivered("deleg_base", T0 + 1)]
    before = committed_ids(tmp_path / "state.db")
    assert "deleg_lead" not in before  # the leader is held before its commit
    threads, outcomes = held.run(writes)
    assert not any(t.is_alive() for t in threads)
    assert held.batch_sizes == [1, FOLLOWERS] and held.commits == [FOLLOWERS]
    assert outcomes[FOLLOWERS - 1] is True and outcomes[FOLLOWERS] is True
    assert committed_ids(tmp_path / "state.db") >= {"deleg_lead", *(f"deleg_f{i}" for i in range(FOLLOWERS - 2))}
    assert ledger.get("deleg_kid").result["results"] == [{"task_index": 0, "status": "completed"}]
    assert ledger.get("deleg_base").delivery_state == "delivered"


def test_a_failing_write_fails_alone_and_its_batch_mates_commit(ledger, tmp_path):
    held = HeldLeader(ledger)
    writes = [lambda i=i: ledger.persist_dispatch(row(f"deleg_{i}"), T0) for i in range(FOLLOWERS + 1)]
    writes[3] = lambda: ledger.persist_dispatch(row("deleg_bad", parent_session_id="\ud800"), T0)  # cannot bind
    _, outcomes = held.run(writes)
    assert isinstance(outcomes[3], LedgerError) and str(tmp_path / "state.db") in str(outcomes[3])
    assert [i for i, o in outcomes.items() if isinstance(o, Exception)] == [3]
    assert held.commits == [FOLLOWERS]  # the batch still committed once
    ids = committed_ids(tmp_path / "state.db")
    assert "deleg_bad" not in ids and {f"deleg_{i}" for i in range(FOLLOWERS + 1) if i != 3} <= ids


def test_a_failed_shared_commit_reruns_each_write_alone(ledger, tmp_path):
    held = HeldLeader(ledger)

    def failing_commit(conn, batch):
        raise sqlite3.OperationalError("disk I/O error")

    ledger._commit_transaction = failing_commit
    writes = [lambda i=i: ledger.persist_dispatch(row(f"deleg_{i}"), T0) for i in range(FOLLOWERS + 1)]
    _, outcomes = held.run(writes)
    assert all(o is None for o in outcomes.values()), outcomes
    assert {f"deleg_{i}" for i in range(FOLLOWERS + 1)} <= committed_ids(tmp_path / "state.db")
    assert ledger._group.batches >= 3 and ledger._group.writes == FOLLOWERS + 2
