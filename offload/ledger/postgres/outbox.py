"""Durable writes the PostgreSQL ledger could not make while its server was unreachable, kept
in order in memory and written once it is back (``WriteOutbox``).

A write is tried at once while nothing waits. If it fails because the server is unreachable
(down, restarting, every backend terminated) it is kept, with its *replay* form, and a
background replayer (a ``Loop``, ``offload-ledger-outbox``, every ``retry_s``) retries the
queue until it is empty, then exits until a write is kept again.

Invariants:
- FIFO: while any write waits, every new write queues behind it and its caller waits for the
  queue to drain (or fail) up to and including its own write, so one unit's dispatch, child
  records, completion and delivery state reach the database in the order they were made;
- a replay is idempotent and fenced (the ledger hands in that form): a dispatch never replaces
  an existing row, a completion moves only a row still running under its lease token, so a
  write that did commit before its acknowledgement was lost, or a unit another host recovered
  meanwhile (its lease expired during the outage), is never overwritten;
- a replay refused for any cause other than "unreachable" (fenced, a bad value) would fail
  again: it is dropped with one log line and the queue moves on;
- bounded: past ``max_bytes`` of waiting writes a new write is not kept (one error line per
  outage); its result is still delivered in memory.

What waits here is lost if the process exits before the server is back; ``close`` tries once
more and says how many writes it could not make.
"""
from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from offload.engine.loop import Clock, Loop
from offload.ledger.protocol import LedgerError

logger = logging.getLogger("offload.engine")
MAX_BYTES = 64 * 1024 * 1024  # waiting writes above this are not kept (results stay in memory)
RETRY_S = 1.0  # the replayer's pause between attempts while the server stays unreachable


def no_payload() -> int:
    """The ``measure`` of a write that carries no payload (a state change)."""
    return 0


@dataclass(eq=False)
class PendingWrite:
    what: str  # "recording a completion", for log lines
    delegation_id: str
    replay: Callable[[], Any]  # makes the write (idempotent, fenced); raises LedgerError
    measure: Callable[[], int]  # bytes it would hold, roughly (its JSON): asked only if it is kept
    size: int = 0
    done: bool = False
    result: Any = None
    error: LedgerError | None = None


class WriteOutbox:
    """The ordered queue of one ledger's writes that wait for its server. Thread-safe."""

    def __init__(self, location: str, *, max_bytes: int = MAX_BYTES, retry_s: float = RETRY_S,
                 clock: Clock | None = None) -> None:
        self.location, self.max_bytes, self.retry_s = location, max_bytes, retry_s
        self._writes: collections.deque[PendingWrite] = collections.deque()
        self._bytes = 0
        self._lock = threading.Lock()  # guards the deque and the counters
        self._flush_lock = threading.Lock()  # one replayer at a time: replays stay in order
        self._overflowed = False
        self._last_error: LedgerError | None = None
        # Kept writes are in the deque before the replayer is started: its idle check sees them.
        self.replayer = Loop("offload-ledger-outbox", self._replay_step, retry_s, clock=clock,
                             still_idle=lambda: not self._writes, what="ledger outbox replay")

    def __len__(self) -> int:
        return len(self._writes)

    def submit(self, what: str, delegation_id: str, write: Callable[[], Any], replay: Callable[[], Any],
               measure: Callable[[], int]) -> Any:
        """``write()`` now if nothing waits; else queue ``replay`` behind the waiting writes and
        drain them. Raises the ``LedgerError`` of an unreachable server after keeping the write.
        ``measure()`` (its size in bytes) runs only when the write is kept: no cost while the
        server answers."""
        item = PendingWrite(what, delegation_id, replay, measure)
        with self._lock:
            waiting = bool(self._writes)
            queued = waiting and self._keep_locked(item)
        if waiting and not queued and not self.flush():
            # Past the bound it is not kept, and it may not overtake the writes kept before it
            # (a completion ahead of its own dispatch would update nothing).
            raise self._unreachable()
        if not queued:
            try:
                return write()
            except LedgerError as exc:
                if exc.kind != "unreachable":
                    raise
                self._last_error = exc
                with self._lock:
                    self._keep_locked(item)
                self.replayer.start()
                raise
        self.flush()
        if item.done and item.error is None:
            return item.result
        raise item.error or self._unreachable()

    def _unreachable(self) -> LedgerError:
        return self._last_error or LedgerError(f"the ledger database {self.location} is unreachable",
                                               kind="unreachable")

    def _keep_locked(self, item: PendingWrite) -> bool:
        item.size = item.measure()
        if self._bytes + item.size > self.max_bytes:
            if not self._overflowed:
                logger.error(
                    "Delegation ledger: more than %d MiB of writes are waiting for %s to come back; newer writes "
                    "(from delegation %s on) are not kept: their results are delivered in memory only, and a "
                    "restart reports those units as unknown. Restore the database connection.",
                    self.max_bytes // (1024 * 1024), self.location, item.delegation_id)
            self._overflowed = True
            return False
        self._writes.append(item)
        self._bytes += item.size
        return True

    def flush(self) -> bool:
        """Replay waiting writes in order; True once none waits, False if the server is still
        unreachable (the rest wait for the next attempt)."""
        with self._flush_lock:
            written = 0
            while True:
                with self._lock:
                    if not self._writes:
                        break
                    item = self._writes[0]
                try:
                    item.result = item.replay()
                except LedgerError as exc:
                    if exc.kind == "unreachable":
                        self._last_error = item.error = exc
                        return False
                    item.error = exc
                    logger.warning("Delegation ledger: %s for delegation %s, kept while %s was unreachable, is "
                                   "dropped: %s", item.what, item.delegation_id, self.location, exc)
                with self._lock:
                    self._writes.popleft()
                    self._bytes -= item.size
                    drained = not self._writes
                    if drained:
                        self._overflowed = False
                item.done, written = True, written + 1
            if written:
                logger.warning("Delegation ledger: %s is reachable again; %d write(s) kept in memory meanwhile are "
                               "written.", self.location, written)
            return True

    def _replay_step(self, now: float) -> bool:
        """One replay attempt; False once nothing waits (the replayer may exit)."""
        return not self.flush() or bool(self._writes)

    def close(self) -> None:
        """Stop the replayer after one last attempt; say how many writes could not be made."""
        self.replayer.stop(timeout_s=5)
        if self._writes and not self.flush():
            logger.error("Delegation ledger: %d write(s) kept while %s was unreachable could not be made before "
                         "this process closed the ledger; their results were delivered in memory, and their units "
                         "are recovered (as unknown) by the next offload process.", len(self._writes), self.location)
