"""``WriteOutbox`` alone, with fake writes: order, what is kept, what is dropped, the bound."""
from __future__ import annotations

import logging

import pytest

from offload.ledger.postgres.outbox import WriteOutbox
from offload.ledger.protocol import LedgerError

pytestmark = pytest.mark.timeout(30)
DOWN = LedgerError("the ledger database X is unreachable (connection refused)", kind="unreachable")


class Server:
    """Applies writes to ``log`` while up; raises ``DOWN`` while down."""

    def __init__(self) -> None:
        self.up, self.log = True, []

    def write(self, name: str, outcome=None):
        def run():
            if not self.up:
                raise DOWN
            self.log.append(name)
            return outcome
        return run


def submit(box: WriteOutbox, server: Server, name: str, size: int = 1, outcome=None):
    return box.submit(f"writing {name}", name, server.write(name), server.write(name + "'", outcome), lambda: size)


def test_a_write_is_made_at_once_while_nothing_waits():
    box, server = WriteOutbox("X", retry_s=60), Server()
    assert submit(box, server, "a", outcome=None) is None
    assert (server.log, len(box)) == (["a"], 0)


def test_a_write_is_measured_only_when_it_is_kept():
    box, server, measured = WriteOutbox("X", retry_s=60), Server(), []

    def measure():
        measured.append(1)
        return 1
    box.submit("writing a", "a", server.write("a"), server.write("a'"), measure)
    assert measured == []  # no JSON encoded for the bound while the server answers
    server.up = False
    with pytest.raises(LedgerError):
        box.submit("writing b", "b", server.write("b"), server.write("b'"), measure)
    assert (measured, len(box)) == ([1], 1)
    box.close()


def test_writes_while_down_are_kept_and_replayed_in_order_before_any_new_write():
    box, server = WriteOutbox("X", retry_s=60), Server()
    server.up = False
    for name in ("dispatch", "child", "completion"):
        with pytest.raises(LedgerError) as caught:
            submit(box, server, name)
        assert caught.value.kind == "unreachable"
    assert (server.log, len(box)) == ([], 3)

    server.up = True
    assert submit(box, server, "delivered", outcome=True) is True  # waits for the queue, then its own
    assert server.log == ["dispatch'", "child'", "completion'", "delivered'"]
    assert len(box) == 0
    box.close()


def test_a_replay_refused_for_another_cause_is_dropped_with_a_line_and_the_queue_moves_on(caplog):
    box, server = WriteOutbox("X", retry_s=60), Server()
    server.up = False
    with pytest.raises(LedgerError):
        submit(box, server, "a")

    def fenced():
        raise LedgerError("lease revoked", kind="fenced")
    with pytest.raises(LedgerError):
        box.submit("recording a completion", "deleg_b", server.write("b"), fenced, lambda: 1)
    with pytest.raises(LedgerError):
        submit(box, server, "c")
    server.up = True
    with caplog.at_level(logging.WARNING, logger="offload.engine"):
        assert box.flush() is True
    assert server.log == ["a'", "c'"]
    assert [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()] == [
        "Delegation ledger: recording a completion for delegation deleg_b, kept while X was unreachable, "
        "is dropped: lease revoked"]
    box.close()


def test_an_error_other_than_unreachable_is_raised_and_nothing_is_kept():
    box = WriteOutbox("X", retry_s=60)

    def bad():
        raise LedgerError("bad value", kind="error")
    with pytest.raises(LedgerError, match="bad value"):
        box.submit("w", "d", bad, bad, lambda: 1)
    assert len(box) == 0


def test_past_the_bound_new_writes_are_not_kept_and_it_is_said_once(caplog):
    box, server = WriteOutbox("X", max_bytes=10, retry_s=60), Server()
    server.up = False
    with caplog.at_level(logging.ERROR, logger="offload.engine"):
        for name, size in (("a", 6), ("b", 6), ("c", 6), ("d", 4)):
            with pytest.raises(LedgerError):
                submit(box, server, name, size)
    assert len(box) == 2  # a and d fit; b and c did not
    assert len([r for r in caplog.records if "are not kept" in r.getMessage()]) == 1
    server.up = True
    assert box.flush() is True
    assert server.log == ["a'", "d'"]


def test_the_replayer_writes_what_waits_once_the_server_is_back():
    box, server = WriteOutbox("X", retry_s=0.01), Server()
    server.up = False
    with pytest.raises(LedgerError):
        submit(box, server, "a")
    server.up = True
    assert box.replayer.join(timeout_s=10)  # it exits once the queue is empty
    assert (server.log, len(box)) == (["a'"], 0)


def test_a_write_past_the_bound_never_overtakes_the_writes_kept_before_it():
    box, server = WriteOutbox("X", max_bytes=10, retry_s=60), Server()
    server.up = False
    with pytest.raises(LedgerError):
        submit(box, server, "dispatch", 6)
    with pytest.raises(LedgerError):  # does not fit, and the server is still down: not tried
        submit(box, server, "big", 6)
    assert (server.log, len(box)) == ([], 1)
    server.up = True
    submit(box, server, "completion", 6)  # too big to queue, written at once: the queue goes first
    assert server.log == ["dispatch'", "completion"]
    box.close()
