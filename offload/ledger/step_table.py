"""A background child's durable step log (``async_delegation_steps``), one mixin per backend over
the same statements: what offload's own agent loop did, step by step, so a new owner can tell
what a dead owner's child had done (``offload.agent.step_log`` writes it).

A step is ``(delegation_id, task_index, seq, kind, written_at, payload)``; kinds:

- ``reply``: the model's reply (its assistant message, with the tool calls it asks for),
  written BEFORE any of those tools runs;
- ``tool_start``: a side-effecting tool call's effect may have begun (``call_id``, ``name``);
  a command still waiting for approval has none;
- ``tool_result``: a tool call's result (``call_id``, ``name``, ``content``), written before
  the next model call starts;
- ``compression``: reserved for a child's context compression (the whole rewritten message
  list, after which earlier steps are not needed to rebuild the conversation); children are
  not compressed today, so none is written.

Invariants: an append is ONE conditional statement, fenced like every write of a running row
(SQLite: the row is running under the writer's pid, start time and owner epoch; PostgreSQL: under the
writer's lease token, after the lease's fence lock, while the lease exists; memory: as SQLite)
and returns False, writing nothing, when the writer no longer owns the unit; ``append_steps``
writes several steps of one child in one transaction (one commit: a result and the next call's
start mark), fenced the same way; a step's
``(delegation_id, task_index, seq)`` is written once (a repeat is ignored). Steps live while
their unit runs: the owner drops them once the unit's result is recorded (``drop_steps``),
and a unit that ends ``unknown`` after its owner died keeps them until ``prune`` deletes its
row. The table is made by ledger migration 8; a read of a ledger without it returns nothing.

``requeue_for_resume`` hands a dead owner's running unit back to the admission queue (its task
rewritten to say what the next owner resumes), in one write conditional on that same dead
owner, so of two processes recovering it at once one wins; the dead owner stays named on the
queued row, so a live process adopts it as any queued row whose owner died.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from offload.ledger.codec import dumps, loads

KINDS = ("reply", "tool_start", "tool_result", "compression")
_COLUMNS = "delegation_id, task_index, seq, kind, written_at, payload_json"
SQLITE_TABLE = (
    "CREATE TABLE IF NOT EXISTS async_delegation_steps (delegation_id TEXT NOT NULL, task_index INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, kind TEXT NOT NULL, written_at REAL NOT NULL, payload_json TEXT NOT NULL,"
    " PRIMARY KEY (delegation_id, task_index, seq))")
POSTGRES_TABLE = (
    "CREATE TABLE IF NOT EXISTS async_delegation_steps (delegation_id text NOT NULL, task_index integer NOT NULL,"
    " seq integer NOT NULL, kind text NOT NULL, written_at double precision NOT NULL, payload_json text NOT NULL,"
    " PRIMARY KEY (delegation_id, task_index, seq))")
_RUNNING = "SELECT 1 FROM async_delegations WHERE delegation_id={m} AND state='running'"
SQLITE_APPEND = (f"INSERT INTO async_delegation_steps ({_COLUMNS}) SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS ("
                 + _RUNNING.format(m="?") + " AND owner_pid=? AND owner_started_at IS ? AND owner_epoch=?)"
                 " ON CONFLICT (delegation_id, task_index, seq) DO NOTHING")
POSTGRES_APPEND = (f"INSERT INTO async_delegation_steps ({_COLUMNS}) SELECT %s, %s::integer, %s::integer, %s,"
                   " %s::double precision, %s WHERE EXISTS (" + _RUNNING.format(m="%s")
                   + " AND owner_token IS NOT DISTINCT FROM %s)"
                   " AND (%s::bigint IS NULL OR EXISTS (SELECT 1 FROM async_delegation_owners WHERE token=%s))"
                   " ON CONFLICT (delegation_id, task_index, seq) DO NOTHING")
_REQUEUE = ("UPDATE async_delegations SET state='queued', task_json={m}, updated_at={m} WHERE delegation_id={m}"
            " AND state='running' AND event_json IS NULL")
# On SQLite a requeue is a take-over: it bumps the owner epoch (``offload.ledger.owner_epoch``).
SQLITE_REQUEUE = (_REQUEUE.format(m="?").replace("SET state='queued',", "SET state='queued', owner_epoch=owner_epoch+1,")
                  + " AND owner_pid IS ? AND owner_started_at IS ?")
POSTGRES_REQUEUE = _REQUEUE.format(m="%s") + " AND owner_token IS NOT DISTINCT FROM %s"
POSTGRES_HAND_OVER = (_REQUEUE.format(m="%s").replace("SET state='queued',", "SET state='queued', owner_token=NULL,"
                                                      " owner_pid=NULL, owner_started_at=NULL, owner_host=NULL,")
                      + " AND owner_token=%s")
_READ = f"SELECT {_COLUMNS} FROM async_delegation_steps WHERE delegation_id={{m}} ORDER BY task_index, seq"
_DROP = "DELETE FROM async_delegation_steps WHERE delegation_id={m}"


@dataclass(frozen=True)
class Step:
    delegation_id: str
    task_index: int
    seq: int
    kind: str
    written_at: float
    payload: dict[str, Any]


def _step(values: tuple[Any, ...]) -> Step:
    delegation_id, task_index, seq, kind, written_at, payload = values
    return Step(delegation_id, int(task_index), int(seq), kind, float(written_at), loads(payload) or {})


def _checked(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"step kind {kind!r}: expected one of {', '.join(KINDS)}")
    return kind


class SqliteSteps:
    """Mixed into ``SqliteLedger``: its ``_write`` (group commit) and ``_side_read``."""

    def append_step(self, delegation_id: str, task_index: int, seq: int, kind: str, payload: dict[str, Any],
                    owner: tuple[int, int | None], now: float) -> bool:
        return self.append_steps(delegation_id, task_index, [(seq, kind, payload)], owner, now)

    def append_steps(self, delegation_id: str, task_index: int, steps: list[tuple[int, str, dict[str, Any]]],
                     owner: tuple[int, int | None], now: float) -> bool:
        epoch = self.epoch_of(delegation_id)
        rows = [(delegation_id, task_index, seq, _checked(kind), now, dumps(payload), delegation_id, *owner, epoch)
                for seq, kind, payload in steps]

        def write(conn: sqlite3.Connection | None) -> bool:
            return conn is not None and all([conn.execute(SQLITE_APPEND, values).rowcount > 0 for values in rows])
        return self._write(write, create=True, transaction=len(rows) > 1)

    def read_steps(self, delegation_id: str) -> list[Step]:
        return [_step(r) for r in self._side_read(_READ.format(m="?"), (delegation_id,))]

    def drop_steps(self, delegation_id: str) -> None:
        self._side_delete("async_delegation_steps", [delegation_id])

    def requeue_for_resume(self, row: Any, task: dict[str, Any], now: float) -> bool:
        values = (dumps(task), now, row.delegation_id, row.owner_pid, row.owner_started_at)
        return self._write(lambda conn: conn is not None and conn.execute(SQLITE_REQUEUE, values).rowcount > 0)


class PostgresSteps:
    """Mixed into ``PostgresLedger``: its ``_run`` and the lease tokens it dispatched under."""

    def append_step(self, delegation_id: str, task_index: int, seq: int, kind: str, payload: dict[str, Any],
                    owner: tuple[int, int | None], now: float) -> bool:
        import offload.ledger.postgres.script as script
        from offload.ledger.postgres.lease import FENCE_LOCK

        token = self._tokens.get(delegation_id)
        values = (delegation_id, task_index, seq, _checked(kind), now, dumps(payload), delegation_id, token, token,
                  token)

        def write(conn: Any) -> bool:
            if token is None:
                return conn.execute(POSTGRES_APPEND, values).rowcount > 0
            _, (written, _) = script.run(conn, [(FENCE_LOCK, (token,)), (POSTGRES_APPEND, values)])
            return written > 0
        return self._run(write, create=True)

    def append_steps(self, delegation_id: str, task_index: int, steps: list[tuple[int, str, dict[str, Any]]],
                     owner: tuple[int, int | None], now: float) -> bool:
        import offload.ledger.postgres.script as script
        from offload.ledger.postgres.lease import FENCE_LOCK

        token = self._tokens.get(delegation_id)
        appends = [(POSTGRES_APPEND, (delegation_id, task_index, seq, _checked(kind), now, dumps(payload),
                                      delegation_id, token, token, token)) for seq, kind, payload in steps]
        fence = [(FENCE_LOCK, (token,))] if token is not None else []

        def write(conn: Any) -> bool:  # one string of statements: one implicit transaction
            results = script.run(conn, [*fence, *appends])[len(fence):]
            return all(written > 0 for written, _ in results)
        return self._run(write, create=True)

    def read_steps(self, delegation_id: str) -> list[Step]:
        rows = self._run(lambda conn: conn.execute(_READ.format(m="%s"), (delegation_id,)).fetchall(), missing=[])
        return [_step(r) for r in rows]

    def drop_steps(self, delegation_id: str) -> None:
        self._run(lambda conn: conn.execute(_DROP.format(m="%s"), (delegation_id,)), missing=None)

    def hand_over(self, row: Any, task: dict[str, Any], now: float) -> bool:
        """Clear our lease token and owner on the row: our later writes fail their token fence."""
        token = self._tokens.get(row.delegation_id)
        if token is None:
            return False
        return self._run(lambda conn: conn.execute(POSTGRES_HAND_OVER, (dumps(task), now, row.delegation_id, token)
                                                   ).rowcount > 0, missing=False)

    def requeue_for_resume(self, row: Any, task: dict[str, Any], now: float) -> bool:
        """As ``settle_abandoned``: the dead owner's lease is revoked first (unless it is live on
        another host), so its fenced writes still in flight commit before, and later ones fail."""
        def requeue(conn: Any) -> bool:
            with conn.transaction():
                found = conn.execute("SELECT owner_token FROM async_delegations WHERE delegation_id=%s"
                                     " AND state='running'", (row.delegation_id,)).fetchone()
                if found is None or (found[0] is not None and not self._revoke_expired(conn, found[0])):
                    return False
                return conn.execute(POSTGRES_REQUEUE, (dumps(task), now, row.delegation_id, found[0])).rowcount > 0
        return self._run(requeue, missing=False)


class MemorySteps:
    """Mixed into ``MemoryLedger``: ``self.store.steps`` under the store's lock."""

    def append_step(self, delegation_id: str, task_index: int, seq: int, kind: str, payload: dict[str, Any],
                    owner: tuple[int, int | None], now: float) -> bool:
        return self.append_steps(delegation_id, task_index, [(seq, kind, payload)], owner, now)

    def append_steps(self, delegation_id: str, task_index: int, steps: list[tuple[int, str, dict[str, Any]]],
                     owner: tuple[int, int | None], now: float) -> bool:
        for _, kind, _ in steps:
            _checked(kind)
        with self.store.lock:
            row = self.store.rows.get(delegation_id)
            if (row is None or row["state"] != "running" or (row["owner_pid"], row["owner_started_at"]) != tuple(owner)
                    or not self.fenced(row)):
                return False
            for seq, kind, payload in steps:
                key = (delegation_id, task_index, seq)
                if key not in self.store.steps:
                    self.store.steps[key] = Step(delegation_id, task_index, seq, kind, now, loads(dumps(payload)))
            return True

    def read_steps(self, delegation_id: str) -> list[Step]:
        with self.store.lock:
            return [s for k, s in sorted(self.store.steps.items()) if k[0] == delegation_id]

    def requeue_for_resume(self, row: Any, task: dict[str, Any], now: float) -> bool:
        with self.store.lock:
            stored = self.store.rows.get(row.delegation_id)
            if (stored is None or stored["state"] != "running" or stored["event_json"] is not None
                    or (stored["owner_pid"], stored["owner_started_at"]) != (row.owner_pid, row.owner_started_at)):
                return False
            stored.update(state="queued", task_json=dumps(task), updated_at=now,
                          owner_epoch=int(stored.get("owner_epoch") or 0) + 1)
            return True

    def drop_steps(self, delegation_id: str) -> None:
        with self.store.lock:
            for key in [k for k in self.store.steps if k[0] == delegation_id]:
                del self.store.steps[key]
