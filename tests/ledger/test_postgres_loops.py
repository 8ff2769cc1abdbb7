"""The PostgreSQL ledger's background loops on a fake clock, against fake connections (no
server, no threads, no sleeps): the lease heartbeat, the outbox replayer and the LISTEN loop.
The same loops against a real server: tests/postgres (lease expiry, server restart, a
terminated listener connection)."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from offload.ledger.postgres.lease import OwnerLease
from offload.ledger.postgres.listen import RECONNECT_BACKOFF_S, CompletionListener
from offload.ledger.postgres.outbox import WriteOutbox
from offload.ledger.protocol import LedgerError
from offload.testing import FakeClock

pytestmark = pytest.mark.timeout(30)
DOWN = LedgerError("the ledger database X is unreachable", kind="unreachable")


class LeaseTable:
    """``async_delegation_owners`` as the lease's statements see it; ``down`` refuses every call."""

    def __init__(self) -> None:
        self.live: set[int] = set()
        self.renewed: list[int] = []
        self.next_token, self.down = 1, False

    def run(self, fn):
        if self.down:
            raise OSError("connection refused")
        return fn(self)

    def execute(self, sql: str, params=()):
        verb = sql.split()[0]
        if verb == "INSERT":
            token, self.next_token = self.next_token, self.next_token + 1
            self.live.add(token)
            return SimpleNamespace(fetchone=lambda: (token,))
        if verb == "UPDATE":
            self.renewed.append(params[1])
            return SimpleNamespace(rowcount=int(params[1] in self.live))
        assert verb == "DELETE", sql
        self.live.discard(params[0])
        return SimpleNamespace(rowcount=1)


def test_the_lease_beats_from_the_first_token_until_release_and_survives_revocation(caplog):
    clock, table = FakeClock(), LeaseTable()
    lease = OwnerLease(table.run, "host-a", lease_s=60, heartbeat_s=10, owner=lambda: (1, None), clock=clock)
    clock.advance(100)
    assert clock.scheduled() == {} and table.renewed == []  # no lease, no heartbeat
    assert lease.token(table) == 1
    assert clock.scheduled() == {"offload-ledger-lease": 110.0}
    clock.advance(30)
    assert table.renewed == [1, 1, 1]

    table.live.clear()  # a recovering host took it
    with caplog.at_level(logging.ERROR, logger="offload.engine"):
        clock.advance(10)
    assert lease.current() is None and "expired and was revoked" in caplog.text
    clock.advance(20)
    assert table.renewed == [1, 1, 1, 1] and lease.heartbeat.running  # nothing to renew; it keeps beating
    assert lease.token(table) == 2  # the next dispatch takes a new lease
    table.down = True
    clock.advance(10)
    assert lease.current() == 2  # unreachable: the token is kept, the next beat tries again
    table.down = False
    clock.advance(10)
    assert table.renewed[-1] == 2

    lease.release()
    assert not lease.heartbeat.running and clock.scheduled() == {} and table.live == set()


class Server:
    def __init__(self) -> None:
        self.up, self.log, self.broken = True, [], False

    def write(self, name: str):
        def run():
            if self.broken:
                raise RuntimeError("a bug in a replay")
            if not self.up:
                raise DOWN
            self.log.append(name)
        return run


def keep(box: WriteOutbox, server: Server, name: str) -> None:
    with pytest.raises(LedgerError):
        box.submit(f"writing {name}", name, server.write(name), server.write(name + "'"), lambda: 1)


def test_the_outbox_replayer_retries_until_the_queue_drains_then_exits_until_a_write_is_kept(caplog):
    clock, server = FakeClock(), Server()
    box = WriteOutbox("X", retry_s=1.0, clock=clock)
    server.up = False
    keep(box, server, "a")
    assert clock.scheduled() == {"offload-ledger-outbox": 1.0}
    clock.advance(3)  # three attempts while the server stays down
    assert (server.log, len(box)) == ([], 1) and box.replayer.running

    server.broken = True  # a replay that raises something unexpected: logged once, retried
    with caplog.at_level(logging.DEBUG, logger="offload.engine"):
        clock.advance(3)
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert "ledger outbox replay failed" in caplog.text and box.replayer.running

    server.broken, server.up = False, True
    clock.advance(1)
    assert (server.log, len(box)) == (["a'"], 0)
    assert not box.replayer.running and clock.scheduled() == {}

    server.up = False
    keep(box, server, "b")
    assert clock.scheduled() == {"offload-ledger-outbox": 8.0}  # started again by the kept write
    server.up = True
    clock.advance(1)
    assert server.log == ["a'", "b'"] and not box.replayer.running
    box.close()


class Conn:
    """A listening connection: ``script`` holds one item per wait, a list of payloads (the
    first is returned alone, the rest by the batch window's read) or an exception."""

    def __init__(self, *script) -> None:
        self.script, self.rest, self.closed, self.sql = list(script), [], False, []

    def execute(self, sql: str):
        self.sql.append(sql)
        return SimpleNamespace(fetchone=lambda: ("s1",))

    def notifies(self, timeout: float, stop_after: int | None = None):
        if stop_after != 1:
            rest, self.rest = self.rest, []
            return [SimpleNamespace(payload=p) for p in rest]
        item = self.script.pop(0) if self.script else []
        if isinstance(item, Exception):
            raise item
        self.rest = item[1:]
        return [SimpleNamespace(payload=p) for p in item[:1]]

    def close(self) -> None:
        self.closed = True

    def cancel_safe(self) -> None:
        pass


def test_the_listener_batches_reconnects_with_backoff_and_says_it_may_have_missed_some(caplog):
    clock, got = FakeClock(), []
    first, second = Conn(["a"], ["b", "c"], OSError("server closed the connection")), Conn(["d"])
    connections = iter([first, OSError("refused"), OSError("refused"), second])

    def connect():
        item = next(connections)
        if isinstance(item, Exception):
            raise item
        return item
    listener = CompletionListener("url", "X", got.append, channel=lambda schema: f"ch_{schema}", connect=connect,
                                  clock=clock).start()
    with caplog.at_level(logging.DEBUG, logger="offload.engine"):
        clock.advance(0)
        assert listener.listening.is_set() and first.sql == ["SELECT current_schema()", 'LISTEN "ch_s1"']
        clock.advance(0)
        assert got == [["a"], ["b", "c"]]  # no None: the first LISTEN precedes the caller's own scan
        clock.advance(0)
        assert first.closed and not listener.listening.is_set()
        assert clock.scheduled() == {"offload-ledger-listen": RECONNECT_BACKOFF_S[0]}
        clock.advance(RECONNECT_BACKOFF_S[0] + RECONNECT_BACKOFF_S[1])  # two refused connects
        assert clock.scheduled() == {"offload-ledger-listen": clock.now() + RECONNECT_BACKOFF_S[2]}
        clock.advance(RECONNECT_BACKOFF_S[2])
    assert got == [["a"], ["b", "c"], None, ["d"]] and listener.listening.is_set()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["Delegation ledger X: lost the notification connection (server closed the connection); "
                        "reconnecting in 0.2s, results meanwhile are found by the slow sweep."]
    listener.stop()
    assert second.closed and not listener.loop.running and clock.scheduled() == {}
