"""The owner epoch of a unit on a ledger without leases (SQLite, memory), and the hand-over of a
unit between two live processes (issue 44, point 4).

On SQLite ownership is a pid and a process start time; that tells a dead owner from a live one,
but not an owner that handed its unit over and is still alive (or took it back) from the one
that runs it now. So every row carries ``owner_epoch``, a counter bumped by each take-over:
taking a queued row (``claim_queued``), handing a dead owner's unit back to the queue to be
resumed (``requeue_for_resume``) and a live owner's hand-over (``hand_over``). A ledger instance
remembers the epoch it took each unit under (``_epochs``; 0 for a unit it dispatched fresh) and
every write a running owner makes -- a step (``append_step``), a finished child
(``record_unit_child``), the terminal write (``persist_completion``) -- lands only under that
epoch. PostgreSQL fences the same writes with its lease token (``hand_over`` there clears it).

``hand_over`` is the leaving owner's one write per unit: the row goes back to ``queued`` with the
task a taker resumes from, its owner cleared (any long-lived process on the ledger may take it at
once, no waiting for a pid to die or a lease to run out) and its epoch bumped (every later write
of the leaving process is refused).

Invariant: of two writers of one unit, at most one holds the row's current epoch; a refused
write changes nothing.
"""
from __future__ import annotations

import sqlite3
from typing import Any

from offload.ledger.codec import dumps

_HAND_OVER = ("UPDATE async_delegations SET state='queued', task_json=?, owner_pid=NULL, owner_started_at=NULL,"
              " owner_epoch=owner_epoch+1, updated_at=? WHERE delegation_id=? AND state='running'"
              " AND event_json IS NULL AND owner_pid IS ? AND owner_started_at IS ? AND owner_epoch=?")
TAKE_QUEUED = ("UPDATE async_delegations SET state='running', owner_pid=?, owner_started_at=?, updated_at=?,"
               " owner_epoch=owner_epoch+1 WHERE delegation_id=? AND state='queued' RETURNING owner_epoch")


class SqliteEpochs:
    """Mixed into ``SqliteLedger``: its ``_write`` (group commit)."""

    _epochs: dict[str, int]

    def epoch_of(self, delegation_id: str) -> int:
        """The epoch this instance writes ``delegation_id`` under (0: dispatched here fresh)."""
        return self._epochs.get(delegation_id, 0)

    def _take_queued(self, delegation_id: str, now: float, owner: tuple[int, int | None]) -> bool:
        def write(conn: sqlite3.Connection | None) -> int | None:
            if conn is None:
                return None
            found = conn.execute(TAKE_QUEUED, (owner[0], owner[1], now, delegation_id)).fetchall()
            return int(found[0][0]) if found else None  # fetchall: a RETURNING statement frees its lock at the end
        epoch = self._write(write)
        if epoch is None:
            return False
        self._epochs[delegation_id] = epoch
        return True

    def hand_over(self, row: Any, task: dict[str, Any], now: float) -> bool:
        """Give ``row`` (running here) back to the queue with ``task``, for any process to take."""
        values = (dumps(task), now, row.delegation_id, row.owner_pid, row.owner_started_at,
                  self.epoch_of(row.delegation_id))
        return self._write(lambda conn: conn is not None and conn.execute(_HAND_OVER, values).rowcount > 0)


class MemoryEpochs:
    """Mixed into ``MemoryLedger``: the rows of ``self.store`` under its lock."""

    def epoch_of(self, delegation_id: str) -> int:
        return self.__dict__.setdefault("_epochs", {}).get(delegation_id, 0)

    def took(self, delegation_id: str, epoch: int) -> None:
        self.__dict__.setdefault("_epochs", {})[delegation_id] = epoch

    def fenced(self, row: dict[str, Any]) -> bool:
        """Whether this instance may write ``row`` (it holds the row's epoch)."""
        return int(row.get("owner_epoch") or 0) == self.epoch_of(row["delegation_id"])

    def hand_over(self, row: Any, task: dict[str, Any], now: float) -> bool:
        with self.store.lock:
            stored = self.store.rows.get(row.delegation_id)
            if (stored is None or stored["state"] != "running" or stored["event_json"] is not None
                    or (stored["owner_pid"], stored["owner_started_at"]) != (row.owner_pid, row.owner_started_at)
                    or not self.fenced(stored)):
                return False
            stored.update(state="queued", task_json=dumps(task), owner_pid=None, owner_started_at=None,
                          owner_epoch=int(stored.get("owner_epoch") or 0) + 1, updated_at=now)
            return True
