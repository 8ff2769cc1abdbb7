"""The in-memory ledger's side tables: control requests, activity snapshots, the tally of
pruned units and the journal, with the same contract as ``sqlite_side`` (kept on the
``MemoryStore`` under its lock)."""
from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from offload.ledger.codec import loads
from offload.ledger.protocol import JournalEntry
from offload.ledger.tally import UnitCounts


class MemorySideTables:
    """Mixed into ``MemoryLedger``: ``self.store`` holds ``controls`` and ``activity``."""

    def request_control(self, delegation_id: str, action: str, now: float, expires_at: float) -> None:
        with self.store.lock:
            self.store.controls[delegation_id] = (action, expires_at)
            self.store.created = True

    def withdraw_control(self, delegation_id: str) -> None:
        with self.store.lock:
            self.store.controls.pop(delegation_id, None)

    def requested_controls(self, now: float) -> list[str]:
        with self.store.lock:
            return [did for did, (_action, expires_at) in self.store.controls.items() if expires_at > now]

    def take_control(self, delegation_ids: list[str], now: float) -> list[tuple[str, str]]:
        with self.store.lock:
            controls = self.store.controls
            for did in [d for d, (_a, expires_at) in controls.items() if expires_at <= now]:
                del controls[did]
            return [(did, controls.pop(did)[0]) for did in delegation_ids if did in controls]

    def write_activity(self, snapshots: dict[str, dict[str, Any]], gone: list[str], now: float) -> None:
        with self.store.lock:
            if not self.store.created:
                return
            self.store.activity.update({did: (now, copy.deepcopy(s)) for did, s in snapshots.items()})
            if gone:
                running = {did for did, row in self.store.rows.items() if row["state"] == "running"}
                for did in [d for d in self.store.activity if d in gone or d not in running]:
                    del self.store.activity[did]

    def read_activity(self, delegation_ids: list[str]) -> dict[str, tuple[float, dict[str, Any]]]:
        with self.store.lock:
            return {did: copy.deepcopy(self.store.activity[did]) for did in delegation_ids
                    if did in self.store.activity}

    def unit_counts(self, since: float | None = None) -> UnitCounts:
        with self.store.lock:
            rows = list(self.store.rows.values())
            pruned = dict(self.store.pruned)
        by_state = Counter((r["state"], r["delivery_state"]) for r in rows)
        recent = Counter((r["state"], r["delivery_state"]) for r in rows
                         if since is not None and r["completed_at"] is not None and r["completed_at"] >= since)
        stops = Counter((r["state"], reason) for r in rows
                        if since is not None and r["completed_at"] is not None and r["completed_at"] >= since
                        and r["state"] != "completed" and (reason := stop_reason_of(r.get("event_json"))))
        return UnitCounts(dict(by_state), pruned, sum(r["delivery_attempts"] for r in rows), dict(recent), dict(stops))

    def append_journal(self, entries: list[JournalEntry]) -> None:
        with self.store.lock:
            if self.store.created:
                self.store.journal.extend(copy.deepcopy(entries))

    def read_journal(self, delegation_id: str) -> list[JournalEntry]:
        with self.store.lock:
            return [copy.deepcopy(e) for e in self.store.journal if e.delegation_id == delegation_id]

    def _prune_side_records(self) -> None:
        """Under the store's lock, after a prune: journal entries and approval requests of rows
        that are gone go too."""
        self.store.journal[:] = [e for e in self.store.journal if e.delegation_id in self.store.rows]
        for key in [k for k in self.store.steps if k[0] not in self.store.rows]:
            del self.store.steps[key]
        for request_id in [i for i, r in self.store.approvals.items() if r.get("delegation_id") not in self.store.rows]:
            del self.store.approvals[request_id]


def stop_reason_of(event_json: str | None) -> str | None:
    reason = (loads(event_json) or {}).get("stop_reason") if event_json else None
    return str(reason) if reason else None
