"""The overview at the top of the roster: counters and the owner processes, as plain dicts.

Counters come from one grouped read of the ledger (``unit_counts``, the read ``/metrics``
makes too), so they cost the same at
100,000 rows as at ten, except ``running``, which counts the roster's own units (live status
of this process's units and published activity of others', so a stalling unit counts as
running and is named). Owners are the distinct owner processes of the roster's units: every
live one, and of the gone ones only the few whose units ended last (the rest are counted).
A unit that stopped early (the event's ``stop_reason``) is no failure: one the stall monitor
stopped counts as stalled whatever its state (a child that honoured the interrupt ends
``interrupted``), one a user stopped is named in the failed counter's note, not counted.
Invariant: a counter links to the history rows it counts (the stalled counter's link shows the
force-finalized ones; a stall-interrupted unit is found by its state), so a number is never a
dead end; nothing here writes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from offload.engine.states import (LIVE_STATES, NOT_COMPLETED, QUEUED, STALLED, STALLING, STOP_STALL, STOP_USER,
                                   UNFINISHED)
from offload.ledger import queries as ledger_queries
from offload.ledger.tally import UnitCounts

if TYPE_CHECKING:
    from offload.runtime import Offload

RECENT_FAILURES_S = 3600.0  # "failed / stalled in the last hour"
EXITED_OWNERS_SHOWN = 3  # of the owner processes that are gone, the ones whose units ended last
FAILED_STATES = tuple(sorted(NOT_COMPLETED - {STALLED}))  # not completed, for a reason other than a stall


def counters(counts: UnitCounts, units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The overview's counters: name, number, tone, the history link, and a breakdown title;
    ``counts`` asked with ``since`` = the start of the last hour."""
    def total(keep, of: dict[tuple[str, str], int] = counts.rows) -> int:
        return sum(n for (state, delivery), n in of.items() if keep(state, delivery))
    running = [u for u in units if u["status"] in LIVE_STATES]
    stalling = sum(1 for u in running if u["status"] == STALLING)
    stops = counts.recent_stops  # (state, stop_reason): units that stopped early are no failures
    stopped_early = {s: sum(n for (state, _r), n in stops.items() if state == s) for s in FAILED_STATES}
    failed = {s: total(lambda state, _d, s=s: state == s, counts.recent) - stopped_early[s] for s in FAILED_STATES}
    stalled = total(lambda state, _d: state == STALLED, counts.recent) + sum(
        n for (state, reason), n in stops.items() if reason == STOP_STALL and state != STALLED)
    by_user = sum(n for (_s, reason), n in stops.items() if reason == STOP_USER)
    return [
        {"key": "running", "label": "running", "value": len(running), "tone": "active", "href": "/history?state=running",
         "note": f"{stalling} stalling" if stalling else ""},
        {"key": "queued", "label": "queued", "value": total(lambda state, _d: state == QUEUED), "tone": "waiting",
         "href": "/history?state=queued", "note": "waiting for an offload worker"},
        {"key": "pending", "label": "awaiting delivery", "tone": "warn", "href": "/history?delivery=pending",
         "value": total(lambda state, delivery: delivery == "pending" and state not in UNFINISHED),
         "note": "finished, not yet acknowledged"},
        {"key": "failed", "label": "failed, last hour", "value": sum(failed.values()), "tone": "bad",
         "href": "/history?age=1h&state=" + ",".join(FAILED_STATES),
         "note": ", ".join(f"{n} {s}" for s, n in failed.items() if n),
         "aside": f"not counted: {by_user} stopped by a user" if by_user else ""},
        {"key": "stalled", "label": "stalled, last hour", "tone": "bad", "href": "/history?age=1h&state=stalled",
         "value": stalled, "note": "stopped by the stall monitor: no progress"},
    ]


def owners(units: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Each live owner process of the roster's units once (pid, host, fate, its units by status),
    then the ``EXITED_OWNERS_SHOWN`` gone ones whose units ended last; and how many gone ones are
    left out (every finished ``offload run`` is one, so listing them all would bury the living)."""
    found: dict[tuple[Any, Any], dict[str, Any]] = {}
    for unit in units:
        owner = unit["owner"]
        if not owner.get("pid"):
            continue
        entry = found.setdefault((owner["host"], owner["pid"]),
                                 {**owner, "running": 0, "units": 0, "last_at": 0.0})
        entry["units"] += 1
        entry["running"] += unit["status"] in LIVE_STATES
        entry["last_at"] = max(entry["last_at"], unit.get("completed_at") or unit.get("dispatched_at") or 0.0)
        if owner["fate"] == "died":  # one unit recovered as unknown says the process died
            entry["fate"] = "died"
    live = [o for o in found.values() if o["fate"] == "alive"]
    gone = sorted((o for o in found.values() if o["fate"] != "alive"), key=lambda o: -o["last_at"])
    order = {"alive": 0, "died": 1, "exited": 2}
    shown = sorted(live + gone[:EXITED_OWNERS_SHOWN], key=lambda o: (order.get(o["fate"], 3), str(o["host"]), o["pid"]))
    return shown, len(gone) - len(gone[:EXITED_OWNERS_SHOWN])


def overview(off: Offload, units: list[dict[str, Any]], now: float) -> dict[str, Any]:
    counts = ledger_queries.unit_counts(off.ledger(), since=now - RECENT_FAILURES_S)
    shown, left_out = owners(units)
    return {"counters": counters(counts, units), "owners": shown, "owners_left_out": left_out}
