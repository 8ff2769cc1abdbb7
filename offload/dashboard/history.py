"""The history page as plain data (and ``/api/delegations``, the same rows as result documents):
its filters from the query string, one page of rows read through ``DelegationLedger.browse``
(keyset paging, so page 50 costs what page 1 does), and the
charts' series from ``finished_since``: finished units per time bucket by outcome, and the
latency percentiles of dispatch → finish and finish → delivered.

Invariants: a bad filter is a ValueError that names it and the fix; nothing here writes a row;
the charts cover every unit finished in the window (``age``, default one day), whatever the
table's other filters, and say so.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from offload.engine.states import COMPLETED, STALLED, UNIT_STATES
from offload.ledger import queries as ledger_queries
from offload.ledger.browse import PAGE_ROWS, Browse

if TYPE_CHECKING:
    from offload.runtime import Offload

DEFAULT_WINDOW_S = 86400.0
BUCKETS = 24
PERCENTILES = (50, 90, 99)
OUTCOMES = ("completed", "failed", "stalled")  # failed: every other terminal state but stalled
API_PAGE_ROWS, API_MAX_ROWS = 100, 1000  # /api/delegations: rows per page by default, and at most


@dataclass(frozen=True)
class Page:
    rows: list[Any]
    next_before: str | None  # the ``before`` of the next page, None on the last one


def parse_before(text: str) -> tuple[float, str] | None:
    """``"1796400000.25~deleg_x"`` (the next-page link's) → the keyset; ValueError if mangled."""
    if not text:
        return None
    at, sep, delegation_id = text.partition("~")
    try:
        if sep and delegation_id:
            return float(at), delegation_id
    except ValueError:
        pass
    raise ValueError(f"page {text!r} is not a page of this history: follow the 'older' link, or drop 'before'")


def api_rows(text: str) -> int:
    """``/api/delegations``' ``limit``: rows per page (default ``API_PAGE_ROWS``); ValueError names the range."""
    if not text.strip():
        return API_PAGE_ROWS
    if text.strip().isdigit() and 1 <= int(text) <= API_MAX_ROWS:
        return int(text)
    raise ValueError(f"limit {text!r} is not a number of rows: use 1 to {API_MAX_ROWS}, and the 'next' link for more")


def browse_query(q: Mapping[str, str], since: float | None, rows: int = PAGE_ROWS) -> Browse:
    """The filters of ``q`` (``state``, ``delivery``, ``session``, ``owner``, ``model``, ``q``,
    ``before``) as a query for one page of ``rows`` (one more is read: is there a next page?)."""
    states = tuple(w for w in q.get("state", "").split(",") if w)
    for word in states:
        if word not in UNIT_STATES:
            raise ValueError(f"state {word!r} is not a unit state: use one of {', '.join(UNIT_STATES)}")
    return Browse(states=states, delivery_state=q.get("delivery", ""), session=q.get("session", "").strip(),
                  owner=q.get("owner", "").strip(), model=q.get("model", "").strip(), text=q.get("q", "").strip(),
                  since=since, before=parse_before(q.get("before", "")), limit=rows + 1)


def page(off: Offload, query: Browse) -> Page:
    """The rows of ``query`` (made by ``browse_query``) and the keyset of the page after them."""
    found = ledger_queries.existing_ledger(off.ledger())
    rows = found.browse(query) if found else []
    more = len(rows) >= query.limit
    rows = rows[:query.limit - 1]
    last = rows[-1] if more else None
    return Page(rows, f"{last.dispatched_at!r}~{last.delegation_id}" if last else None)


def _outcome(state: str) -> str:
    return state if state in (COMPLETED, STALLED) else "failed"


def percentile(sorted_values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of already sorted values; None for none."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(pct / 100 * len(sorted_values)) - 1)]


def charts(off: Offload, window_s: float, now: float | None = None) -> dict[str, Any]:
    """The series: per bucket, finished units by outcome; overall latency percentiles."""
    now = time.time() if now is None else now
    start = now - window_s
    found = ledger_queries.existing_ledger(off.ledger())
    finished = found.finished_since(start) if found else []
    width_s = window_s / BUCKETS
    buckets = [{"start": start + i * width_s, **{o: 0 for o in OUTCOMES}} for i in range(BUCKETS)]
    to_finish, to_delivery = [], []
    for dispatched_at, completed_at, delivered_at, state in finished:
        buckets[min(BUCKETS - 1, int((completed_at - start) // width_s))][_outcome(state)] += 1
        to_finish.append(max(0.0, completed_at - dispatched_at))
        if delivered_at is not None:
            to_delivery.append(max(0.0, delivered_at - completed_at))
    to_finish.sort()
    to_delivery.sort()
    return {"start": start, "end": now, "width_s": width_s, "buckets": buckets, "total": len(finished),
            "latency": [{"name": "dispatch → finish", "n": len(to_finish),
                         "values": [(p, percentile(to_finish, p)) for p in PERCENTILES]},
                        {"name": "finish → delivered", "n": len(to_delivery),
                         "values": [(p, percentile(to_delivery, p)) for p in PERCENTILES]}]}


def outcome_geometry(chart: dict[str, Any], width: float = 1000.0, height: float = 170.0) -> dict[str, Any]:
    """Stacked bars of finished units per bucket, in SVG units (the page scales the SVG)."""
    left, top, bottom = 44.0, 8.0, 22.0
    plot_h = height - top - bottom
    peak = max([1, *(sum(b[o] for o in OUTCOMES) for b in chart["buckets"])])
    bar_w = (width - left) / len(chart["buckets"])
    bars = []
    for i, bucket in enumerate(chart["buckets"]):
        y = top + plot_h
        for outcome in OUTCOMES:
            h = bucket[outcome] / peak * plot_h
            if bucket[outcome]:
                y -= h
                bars.append({"x": round(left + i * bar_w + 1, 1), "y": round(y, 1), "w": round(bar_w - 2, 1),
                             "h": round(max(h, 1.0), 1), "outcome": outcome, "count": bucket[outcome],
                             "ago_s": chart["end"] - bucket["start"]})
    ticks = [{"y": round(top + plot_h - v / peak * plot_h, 1), "label": v} for v in sorted({0, peak // 2, peak})]
    labels = [{"x": round(left + i * bar_w, 1), "ago_s": chart["end"] - chart["buckets"][i]["start"]}
              for i in range(0, len(chart["buckets"]), 6)]
    return {"width": width, "height": height, "left": left, "base": top + plot_h, "bars": bars, "ticks": ticks,
            "labels": labels}


def latency_geometry(chart: dict[str, Any], width: float = 1000.0) -> dict[str, Any]:
    """Horizontal bars of each latency's percentiles, one scale per latency."""
    left, row_h, rows = 210.0, 22.0, []
    y = 6.0
    for series in chart["latency"]:
        peak = max([v for _, v in series["values"] if v is not None] or [1.0]) or 1.0
        rows.append({"y": y, "heading": f"{series['name']} ({series['n']} units)"})
        y += row_h
        for pct, value in series["values"]:
            w = 0.0 if value is None else max(1.0, value / peak * (width - left - 90))
            rows.append({"y": y, "pct": pct, "value": value, "x": left, "w": round(w, 1)})
            y += row_h
        y += 6
    return {"width": width, "height": y, "rows": rows, "left": left}
