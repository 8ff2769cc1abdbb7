"""The durable ledger of background delegations: one interface, in domain terms.

The engine talks only to this interface; ``open_ledger()`` (``offload/ledger/factory.py``)
is the one place that names a backend. SQLite (``sqlite.py``, its table in ``sqlite_rows.py``),
PostgreSQL (``postgres/ledger.py``, its statements in ``postgres/sql.py``; it adds the capabilities
watch, queue and fencing) and an in-process ``MemoryLedger`` (``memory.py``) implement it;
every backend must pass ``tests/ledger/test_contract.py`` (``OFFLOAD_TEST_LEDGER=postgresql``
runs it on PostgreSQL). Nothing here assumes a file: a ledger names where its rows
live with ``location``, for messages and as the identity of its store.

Invariants every backend keeps:
- a row is written ``running`` at dispatch and moves to a terminal state exactly once per
  writer (terminal writes are upserts, so a ledger file that vanished mid-run is refilled);
- ``delivery_state`` goes ``pending`` → ``delivered`` | ``dropped`` and never back;
- at most one live claim per row: a claim is granted only to a pending row whose previous
  claim is absent or older than the lease, so two consumers never both deliver one row;
- policy numbers (lease, attempt budget, ages) are arguments, never backend constants.

A row's ``origin`` (who the result belongs to) travels whole in its task JSON
(``DispatchRow.of``); the session columns repeat its session fields for queries and for a
previous version, and a row written before the task carried it is read from those columns.
"""
from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from offload.origin import Origin

# ``alive(pid, started_at)``: is that process running on this host (the local pid check)?
OwnerCheck = Callable[[int | None, int | None], bool]

from offload.engine.errors import OffloadError
from offload.ledger.reads import Browse, UnitCounts


class LedgerError(OffloadError):
    """A ledger operation failed. The message names the file, the cause and the fix."""

    def __init__(self, message: str, *, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind  # locked | corrupt | full | unwritable | error: one log line per kind


@dataclass(frozen=True)
class DispatchRow:
    delegation_id: str
    origin_session: str
    dispatched_at: float
    task: dict[str, Any]
    origin_ui_session_id: str = ""
    origin_session_id: str = ""
    parent_session_id: str | None = None
    owner_pid: int | None = None
    owner_started_at: int | None = None

    @classmethod
    def of(cls, delegation_id: str, origin: Origin, dispatched_at: float, task: dict[str, Any],
           owner_pid: int | None = None, owner_started_at: int | None = None) -> DispatchRow:
        """The row of a unit dispatched for ``origin``: the origin travels whole in the task JSON,
        and its session fields fill the columns a previous version selects by."""
        return cls(delegation_id, origin.session_key, dispatched_at, {**task, "origin": origin.to_json()},
                   origin.ui_session_id, origin.wake_session_id, origin.parent_session_id, owner_pid, owner_started_at)

    @property
    def origin(self) -> Origin:
        return Origin.of_row(self)


def parse_json(raw: str | None) -> Any:
    """A stored JSON column; None when empty or unreadable (one bad column never fails a row)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


class StoredJson(str):
    """JSON text as read from a row, not parsed yet (see ``LazyJson``)."""


# Taken only on a column's first read: two threads reading one fresh row must get one object,
# or a change one of them makes to it would be lost.
_FIRST_READ = threading.Lock()


class LazyJson:
    """A ``LedgerRow`` JSON field that parses its ``StoredJson`` text on first read, once.

    Replay reads every pending row and needs only its ``event``; recovery needs ``task`` and
    ``result`` only of rows whose owner died. Any other value is stored and read as is, so rows
    built in code, ``==``, ``repr`` and ``dataclasses.replace`` behave as before."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, row: Any, owner: type | None = None) -> Any:
        if row is None:
            return None  # the dataclass field's default
        value = row.__dict__[self.name]
        if type(value) is StoredJson:
            with _FIRST_READ:
                value = row.__dict__[self.name]
                if type(value) is StoredJson:
                    value = row.__dict__[self.name] = parse_json(value)
        return value

    def __set__(self, row: Any, value: Any) -> None:
        row.__dict__[self.name] = value


@dataclass
class LedgerRow:
    """A decoded row. ``event``/``result``/``task`` are the parsed JSON columns (or None),
    parsed when first read."""

    delegation_id: str
    origin_session: str
    state: str
    dispatched_at: float
    completed_at: float | None = None
    updated_at: float | None = None
    origin_ui_session_id: str = ""
    origin_session_id: str = ""
    parent_session_id: str | None = None
    task: dict[str, Any] | None = LazyJson()  # type: ignore[assignment]
    event: dict[str, Any] | None = LazyJson()  # type: ignore[assignment]
    result: dict[str, Any] | None = LazyJson()  # type: ignore[assignment]
    delivery_state: str = "pending"
    delivery_attempts: int = 0
    delivered_at: float | None = None
    delivery_claim: str | None = None
    delivery_claimed_at: float | None = None
    owner_pid: int | None = None
    owner_started_at: int | None = None
    delivery_claim_pid: int | None = None  # the claim holder's pid and start time (see claim_abandoned)
    delivery_claim_started_at: int | None = None
    delivery_progress: int = 0  # parts of a split message already shown
    drop_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def origin(self) -> Origin:
        """Who the result belongs to (a row of a previous version: from its columns)."""
        return Origin.of_row(self)


@dataclass(frozen=True)
class JournalEntry:
    """One thing that happened to a unit, beyond its row: a stall warning, an interrupt, a message
    or tool call of one of its children. ``child``: the child's task index (None: the unit);
    ``data``: JSON-able details of the ``kind``. Kept while the unit's row is."""

    delegation_id: str
    at: float
    kind: str
    child: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


class DelegationLedger(Protocol):
    location: str
    """Where the rows live, for messages a user acts on and as the identity of the store (a
    file path, a URL without its password). Two instances on one store have equal locations."""

    def exists(self) -> bool:
        """Whether the ledger's store exists. Read paths never create it."""

    def persist_dispatch(self, row: DispatchRow, now: float) -> None: ...

    def forget(self, delegation_id: str) -> None:
        """Remove a row whose unit was never scheduled."""

    def record_unit_child(self, delegation_id: str, entry: dict[str, Any], now: float) -> bool:
        """Add one finished child's entry to a running row's partial results."""

    def persist_completion(self, row: DispatchRow, event: dict[str, Any], result: dict[str, Any], now: float) -> None:
        """Write the terminal event; upsert so a vanished row is written whole again."""

    def running_rows(self) -> list[LedgerRow]:
        """Rows still marked running: candidates for owner-death recovery."""

    def is_abandoned(self, row: LedgerRow, alive: OwnerCheck) -> bool:
        """Whether ``row``'s owner is gone, so any process may recover the row. ``alive`` is the
        local pid check, meaningful only for owners on this host (a shared ledger judges
        owners elsewhere by their lease)."""

    def owner_host(self, row: LedgerRow) -> str | None:
        """The host ``row``'s owner process runs on (None: no owner recorded): the host a shared
        ledger stamped on the row, or this host on a ledger only one host uses."""

    def owned_here(self, row: LedgerRow, is_owner: OwnerCheck) -> bool:
        """Whether ``row``'s owner is a process on this host that ``is_owner(pid, started)``
        accepts (holding a live lease, where the ledger has leases). Ownership says who runs a
        unit, never who delivers it: any consumer of its session may."""

    # -- the admission queue (``delegation.at_capacity: queue``; ``offload.subagents.admission``) --
    def enqueue_unit(self, row: DispatchRow, now: float, held: bool = False) -> bool:
        """Write ``row`` as ``queued``; False, writing nothing, if that id exists already.
        ``held``: ``row``'s owner queued it at capacity and starts it itself while it lives
        (any live owner may once it died); else it has no owner (for ``offload worker``)."""

    def queued_rows(self) -> list[LedgerRow]:
        """Rows still ``queued``, first queued first."""

    def claim_queued(self, delegation_id: str, now: float, owner: tuple[int, int | None],
                     max_running: int) -> LedgerRow | None:
        """Take one queued row for this process: it turns ``running`` under ``owner`` (pid, start
        time) in one conditional write, so of two racing owners one wins; None if it is not
        queued any more (or, on a ledger shared by hosts, ``max_running`` slots run on all of
        them). The caller then dispatches it under the same id, or ``requeue_unit``s it."""

    def requeue_unit(self, row: DispatchRow, now: float) -> None:
        """Put a taken row back in the queue, in its place (``row``: what it was queued as,
        rewritten whole if it vanished meanwhile); a row that has a result is left alone."""

    def settle_abandoned(self, delegation_id: str, event: dict[str, Any], result: dict[str, Any], now: float) -> bool:
        """Mark a running row ``unknown`` with its recovered event; False if it moved meanwhile."""

    def pending_rows(self) -> list[LedgerRow]:
        """Terminal rows awaiting delivery, oldest first."""

    def undelivered_rows(self, session_id: str) -> list[LedgerRow]:
        """Rows of ``session_id`` (its session key, parent or origin session) not yet delivered
        or dropped -- queued, running or finished -- oldest dispatch first."""

    def claimed_rows(self) -> list[LedgerRow]:
        """Pending rows someone holds a delivery claim on (live or lapsed), oldest claim first."""

    def claim_abandoned(self, row: LedgerRow, alive: OwnerCheck) -> bool:
        """Whether the holder of ``row``'s delivery claim is known dead: its process on this host
        (``alive``, the pid check), its lease on another host. False when it cannot be told (a
        claim made without a holder), so that claim holds until the claim lease."""

    def claim_delivery(self, delegation_id: str, claim: str, now: float, lease_s: float,
                       holder: tuple[int, int | None] | None = None) -> bool | None:
        """True if claimed, False if not claimable, None if the row does not exist. ``holder``:
        the claiming process's (pid, start time), recorded for ``claim_abandoned``."""

    def complete_delivery(self, delegation_id: str, claim: str, now: float) -> bool: ...

    def release_delivery(self, delegation_id: str, claim: str, now: float, max_attempts: int,
                         reason: str | None = None) -> str:
        """Clear the claim; returns the new delivery state ('' if the claim did not match).
        Out of attempts the row is dropped, with ``reason`` as its drop reason."""

    def record_progress(self, delegation_id: str, claim: str, parts: int, now: float) -> bool:
        """Under a matching claim, note that the first ``parts`` parts of the result were shown;
        a later attempt (of any consumer) resumes after them."""

    def defer_delivery(self, delegation_id: str, claim: str, now: float) -> bool:
        """Clear the claim and give back the attempt it cost."""

    def drop_delivery(self, delegation_id: str, claim: str | None, now: float, reason: str | None = None) -> bool:
        """Pending → dropped (with a matching claim, or unconditionally when claim is None), with
        ``reason`` recorded for ``offload inbox``, ``agents`` and the dashboard on any host."""

    def mark_delivered(self, delegation_id: str, now: float) -> bool: ...

    def prune(self, now: float, retention_s: float, max_settled: int) -> int:
        """Delete settled (delivered/dropped) rows past retention or beyond the newest max_settled."""

    def settled_rows(self, limit: int) -> list[LedgerRow]:
        """Delivered or dropped rows, most recently updated first."""

    def get(self, delegation_id: str) -> LedgerRow | None: ...

    def unit_counts(self, since: float | None = None) -> UnitCounts:
        """Units by (state, delivery_state): the rows now, those of them finished at or after
        ``since`` (if given), and those ``prune`` deleted over the ledger's life
        (``offload.ledger.tally``), from aggregate reads (one scan of the rows however many
        there are); empty without a store. ``/metrics`` and the dashboard's overview read this."""

    def browse(self, query: Browse) -> list[LedgerRow]:
        """One page of every row (``offload.ledger.browse``): the filters of ``query``, newest
        dispatch first, starting after its keyset, on the indexes of schema version 4."""

    def finished_since(self, since: float) -> list[tuple[float, float, float | None, str]]:
        """``(dispatched_at, completed_at, delivered_at, state)`` of every row finished at or after
        ``since``, oldest finish first: what the history's charts are drawn from."""

    # -- control requests and live activity, across processes and hosts (``*_side.py``) --------
    def request_control(self, delegation_id: str, action: str, now: float, expires_at: float) -> None:
        """Ask whichever process owns ``delegation_id`` to act (``"interrupt"``) before ``expires_at``;
        a repeated request replaces the previous one."""

    def withdraw_control(self, delegation_id: str) -> None: ...

    def requested_controls(self, now: float) -> list[str]:
        """Ids with an unexpired request: an owner's cheap poll (a read) before it looks at its units."""

    def take_control(self, delegation_ids: list[str], now: float) -> list[tuple[str, str]]:
        """Remove and return ``(id, action)`` of unexpired requests for these (owned) units; drop
        expired requests. Of two racing takers only one gets a request. Nothing requested: no write."""

    def write_activity(self, snapshots: dict[str, dict[str, Any]], gone: list[str], now: float) -> None:
        """Store each unit's activity snapshot as written at ``now``. With ``gone`` units, remove
        theirs and every snapshot whose unit is no longer running (left by an owner that exited)."""

    def read_activity(self, delegation_ids: list[str]) -> dict[str, tuple[float, dict[str, Any]]]:
        """``id -> (written_at, snapshot)`` for the units that have one."""

    def append_journal(self, entries: list[JournalEntry]) -> None:
        """Store ``entries`` in one write (the owner loop's batch); the table is created on first
        write, and entries of a row that ``prune`` deletes go with it."""

    def read_journal(self, delegation_id: str) -> list[JournalEntry]:
        """The unit's entries in the order they were appended; empty for a ledger without any."""

    # -- background children's step logs (``offload.ledger.step_table``) -----------------------
    def append_step(self, delegation_id: str, task_index: int, seq: int, kind: str, payload: dict[str, Any],
                    owner: tuple[int, int | None], now: float) -> bool:
        """Write one step of a running unit's child, fenced by its ownership; False (nothing
        written) when the unit is not running under this writer."""

    def append_steps(self, delegation_id: str, task_index: int, steps: list[tuple[int, str, dict[str, Any]]],
                     owner: tuple[int, int | None], now: float) -> bool:
        """Write several ``(seq, kind, payload)`` steps of one child in one transaction, fenced as
        ``append_step``; False (nothing written) when the unit is not running under this writer."""

    def read_steps(self, delegation_id: str) -> list[Any]:
        """The unit's steps (``step_table.Step``), by child then ``seq``."""

    def drop_steps(self, delegation_id: str) -> None:
        """Forget the unit's steps (its result is recorded)."""

    def requeue_for_resume(self, row: LedgerRow, task: dict[str, Any], now: float) -> bool:
        """Turn ``row`` (running under a dead owner) back into a queued row with ``task``, only
        if it still runs under that owner; whether it did."""

    def hand_over(self, row: LedgerRow, task: dict[str, Any], now: float) -> bool:
        """A live owner gives ``row`` (running here) back to the queue with ``task``, its owner
        cleared so any long-lived process may take it at once, and every later write of this
        owner for it refused (``offload.ledger.owner_epoch``); whether it did."""

    def close(self) -> None: ...


def local_host() -> str:
    """This machine's name, as owners are named by host (a shared ledger's default ``host_id``)."""
    return socket.gethostname() or "localhost"


class SingleHostOwners:
    """Owner liveness for a ledger only one host uses: the pid check alone decides, and every
    owner runs on this host."""

    def owner_host(self, row: LedgerRow) -> str | None:
        return local_host() if row.owner_pid else None

    def is_abandoned(self, row: LedgerRow, alive: OwnerCheck) -> bool:
        return not alive(row.owner_pid, row.owner_started_at)

    def owned_here(self, row: LedgerRow, is_owner: OwnerCheck) -> bool:
        return is_owner(row.owner_pid, row.owner_started_at)

    def claim_abandoned(self, row: LedgerRow, alive: OwnerCheck) -> bool:
        return (row.delivery_claim is not None and row.delivery_claim_pid is not None
                and not alive(row.delivery_claim_pid, row.delivery_claim_started_at))
