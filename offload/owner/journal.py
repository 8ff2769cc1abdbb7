"""The journal of this process's units: what happened to each beyond its ledger row, for the
dashboard's timeline and transcripts, written to the ledger's journal in batches.

Sources: the engine's observer notifications (the start of a unit with children, a stall
warning, an interrupt, each child's end)
and each running child's conversation, read from the unit's ``transcript_fn`` (given at
dispatch, like ``progress_fn``): its messages, tool calls with their arguments, tool results.
Entries are buffered in memory (``note``) and written by the owner loop on its activity cadence
(``flush``, every ``activity.INTERVAL_S``), by its last step when no unit is live, and at close.
Each message carries the time the child's loop added it (``AIAgent.transcript``).

Invariants: nothing here is on the dispatch path (a dispatch only stores ``transcript_fn`` in
its record; bench case 1 passes none, and the observer returns at the first check for the
notifications it ignores); a failed write keeps the entries for the next flush, up to
``MAX_PENDING`` (the oldest are dropped past that, never the engine slowed); text is clipped to
``MAX_TEXT_CHARS`` per field, so one huge tool result cannot bloat the ledger.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from offload.ledger import JournalEntry

logger = logging.getLogger(__name__)

MAX_TEXT_CHARS = 20_000
MAX_PENDING = 20_000
_KINDS = frozenset({"dispatching", "started", "stalled", "interrupted", "child_recorded", "finalized"})
# Per built child: (its task index, [(time said, message), ...] so far).
TranscriptFn = Callable[[], list[tuple[int, list[tuple[float, dict[str, Any]]]]]]


def clip(text: Any, limit: int = MAX_TEXT_CHARS) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters not kept]"


def message_entry(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One chat message as a journal ``(kind, data)``: ``message`` (role, text, tool calls by
    name with their arguments) or ``tool_result`` (the call id and its output)."""
    role = str(message.get("role") or "")
    if role == "tool":
        return "tool_result", {"call_id": message.get("tool_call_id"), "content": clip(message.get("content") or "")}
    calls = [{"id": c.get("id"), "name": (c.get("function") or {}).get("name"),
              "arguments": clip((c.get("function") or {}).get("arguments") or "")}
             for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    data: dict[str, Any] = {"role": role, "content": clip(message.get("content") or "")}
    if calls:
        data["tool_calls"] = calls
    return "message", data


class Journal:
    """The buffer of one runtime. ``owns(delegation_id)``: whether a notification is about a unit
    of this runtime (observers are told about every runtime's units in the process)."""

    def __init__(self, owns: Callable[[str], bool]) -> None:
        self._owns = owns
        self._lock = threading.Lock()
        self._pending: list[JournalEntry] = []
        self._watched: dict[str, TranscriptFn] = {}
        self._read: dict[tuple[str, int], int] = {}  # (unit, child position) -> messages journaled
        self.writes = 0  # batched writes made (tests, the bench)

    # -- sources ----------------------------------------------------------------------------
    def observe(self, kind: str, delegation_id: str, fields: dict[str, Any]) -> None:
        """An engine observer (``offload.engine.observers``)."""
        if kind not in _KINDS or not self._owns(delegation_id):
            return
        if kind == "started":  # when a unit with children left the queue (a slot, a worker) and ran
            if delegation_id in self._watched:
                self.note(delegation_id, "start")
        elif kind == "dispatching":  # before its worker can start it: its start is never missed
            transcript_fn = fields["record"].get("transcript_fn")
            if transcript_fn is not None:
                with self._lock:
                    self._watched[delegation_id] = transcript_fn
        elif kind == "stalled":
            self.note(delegation_id, "stall")
        elif kind == "interrupted":
            self.note(delegation_id, "interrupt", reason=fields.get("reason"))
        elif kind == "child_recorded":
            entry = fields.get("entry") or {}
            self.note(delegation_id, "child_end", entry.get("task_index"), status=entry.get("status"))
        elif delegation_id in self._watched:  # finalized: what the children said last, then stop reading
            self.sample([delegation_id])
            with self._lock:
                self._watched.pop(delegation_id, None)
                for key in [k for k in self._read if k[0] == delegation_id]:
                    del self._read[key]

    def note(self, delegation_id: str, kind: str, child: int | None = None, **data: Any) -> None:
        entry = JournalEntry(delegation_id, time.time(), kind, child, {k: v for k, v in data.items() if v is not None})
        with self._lock:
            self._pending.append(entry)
            del self._pending[:-MAX_PENDING]

    def sample(self, delegation_ids: list[str] | None = None) -> None:
        """Journal what the watched units' children said since the last read."""
        with self._lock:
            for did in [d for d in self._watched if not self._owns(d)]:  # a dispatch that was refused
                del self._watched[did]
            watched = [(did, fn) for did, fn in self._watched.items() if delegation_ids is None or did in delegation_ids]
        for did, transcript_fn in watched:
            try:
                per_child = transcript_fn()
            except Exception:  # a child that cannot be read now is read at the next flush
                logger.debug("reading the transcript of %s failed", did, exc_info=True)
                continue
            for position, said in enumerate(per_child if isinstance(per_child, list) else []):
                child, messages = said
                if isinstance(messages, list):  # a foreign child's answer is ignored, never trusted
                    self._note_new(did, position, child, messages)

    def _note_new(self, did: str, position: int, child: int, messages: list[tuple[float, dict[str, Any]]]) -> None:
        with self._lock:
            start = self._read.get((did, position), 0)
            self._read[(did, position)] = len(messages)
        fresh = [JournalEntry(did, at, *_split(message_entry(m), child)) for at, m in messages[start:]
                 if isinstance(m, dict) and m.get("role") != "system"]
        if fresh:
            with self._lock:
                self._pending.extend(fresh)
                del self._pending[:-MAX_PENDING]

    def unwritten(self, delegation_id: str) -> list[JournalEntry]:
        """What this runtime holds for ``delegation_id`` that is not in the ledger yet (read now)."""
        if delegation_id in self._watched:
            self.sample([delegation_id])
        with self._lock:
            return [e for e in self._pending if e.delegation_id == delegation_id]

    # -- the owner loop ---------------------------------------------------------------------
    def flush(self, ledger: Any) -> None:
        """Read the watched children, then write everything pending in one batch; on failure
        keep it for the next flush."""
        self.sample()
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return
        try:
            ledger.append_journal(batch)
            self.writes += 1
        except Exception:
            logger.debug("writing the journal failed; retried at the next flush", exc_info=True)
            with self._lock:
                self._pending[:0] = batch
                del self._pending[:-MAX_PENDING]


def _split(kind_data: tuple[str, dict[str, Any]], child: int) -> tuple[str, int, dict[str, Any]]:
    kind, data = kind_data
    return kind, child, data
