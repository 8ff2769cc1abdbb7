"""Live per-child activity of every process, through the ledger.

API calls, the current tool, seconds since a child's last activity, the last line it wrote,
its last finished tool call and the stall clock are in-memory facts of the process that runs a unit. So each owner publishes a snapshot of its
live units (``Publisher``, from ``offload.owner.loop``: at most every ``INTERVAL_S``, only
units live for at least that long and whose snapshot changed, one batched write), and the
dashboard and ``offload agents`` read it for units of other processes and hosts
(``remote_views``), marked with how old the snapshot is.

A snapshot stores absolute times (``progress_at``, each child's ``last_activity_at``, rounded
to the second), not "seconds since", so a unit that is quietly waiting yields the same
snapshot tick after tick and costs no write; readers turn them back into the live roster's
``seconds_since_*`` fields. Invariant: nothing here is on the dispatch path.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterable

from offload.engine.states import LIVE_STATES

logger = logging.getLogger(__name__)

INTERVAL_S = 2.0
_STALL_KEYS = ("stalled_after_quiet_seconds", "stall_threshold_seconds", "stall_in_tool")
_PROGRESS_KEYS = ("last_text", "last_tool")  # a child's last line of text and last finished tool call


def _at(now: float, seconds_ago: Any) -> float | None:
    if not isinstance(seconds_ago, (int, float)) or isinstance(seconds_ago, bool):
        return None
    return float(round(now - seconds_ago))


def snapshot(item: dict[str, Any], now: float) -> dict[str, Any]:
    """The publishable part of one ``list_async_delegations()`` item (pure)."""
    children = []
    for child in item.get("children_activity") or []:
        child = child if isinstance(child, dict) else {}
        children.append({"api_calls": child.get("api_calls"), "current_tool": child.get("current_tool"),
                         "last_activity_at": _at(now, child.get("seconds_since_activity")),
                         **{k: child[k] for k in _PROGRESS_KEYS if child.get(k)}})
    snap = {"status": item.get("status"), "progress_at": _at(now, item.get("seconds_since_progress")),
            "in_tool": item.get("in_tool"), "children": children,
            "children_finished": sorted(int(i) for i in (item.get("children_finished") or {}))}
    snap.update({k: item[k] for k in _STALL_KEYS if item.get(k) is not None})
    return snap


def live_view(snap: dict[str, Any], written_at: float, now: float) -> dict[str, Any]:
    """A snapshot read back as the live roster's fields (``seconds_since_progress``,
    ``children_activity`` with ``seconds_since_activity``), plus ``snapshot_age_s``."""
    def since(at: Any) -> float | None:
        return round(max(0.0, now - at), 1) if isinstance(at, (int, float)) else None
    view = {k: snap.get(k) for k in ("status", "in_tool", *_STALL_KEYS) if snap.get(k) is not None}
    view.update(seconds_since_progress=since(snap.get("progress_at")), snapshot_age_s=since(written_at),
                children_activity=[{"api_calls": c.get("api_calls"), "current_tool": c.get("current_tool"),
                                    "seconds_since_activity": since(c.get("last_activity_at")),
                                    **{k: c[k] for k in _PROGRESS_KEYS if c.get(k)}}
                                   for c in snap.get("children") or [] if isinstance(c, dict)])
    return view


def remote_views(ledger: Any, delegation_ids: Iterable[str], now: float | None = None) -> dict[str, dict[str, Any]]:
    """``id -> live_view`` for the given running units that have a published snapshot; empty
    when the ledger cannot say (an old ledger, a read-only view, a server that is down)."""
    ids = list(delegation_ids)
    if not ids:
        return {}
    now = time.time() if now is None else now
    try:
        found = ledger.read_activity(ids)
    except Exception:  # activity is decoration: the roster still shows the ledger rows
        logger.debug("reading activity snapshots failed", exc_info=True)
        return {}
    return {did: live_view(snap, written_at, now) for did, (written_at, snap) in found.items()}


class Publisher:
    """What this process last published, so only changes are written."""

    def __init__(self) -> None:
        self.published: dict[str, dict[str, Any]] = {}
        self.writes = 0  # batched writes made (for the bench and tests)
        self._lock = threading.Lock()  # an exiting loop thread and its successor may overlap

    def publish(self, ledger: Any, items: list[dict[str, Any]], now: float) -> None:
        with self._lock:
            self._publish(ledger, items, now)

    def _publish(self, ledger: Any, items: list[dict[str, Any]], now: float) -> None:
        # A unit younger than one interval is left out: its snapshot would be stale or gone by
        # the time a reader sees it, and short units (bench case 1) then cost no write at all.
        live = {i["delegation_id"]: snapshot(i, now) for i in items if i.get("status") in LIVE_STATES
                and now - (i.get("dispatched_at") or 0.0) >= INTERVAL_S}
        changed = {did: snap for did, snap in live.items() if self.published.get(did) != snap}
        gone = [did for did in self.published if did not in live]
        if not changed and not gone:
            return
        ledger.write_activity(changed, gone, now)
        self.writes += 1
        self.published = live
