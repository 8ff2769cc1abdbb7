"""One delegation drawn on one time axis, as geometry for the SVG template (``_timeline.svg``).

Lanes, top to bottom: the unit (queued from dispatch until it started, when it waited; then
running to its finish; a stall warning, an interrupt and the grace after it marked on it, and
where a new owner started it again after its owner died), one lane per child (from dispatch to its end,
its tool calls as ticks, and a resumed child's resume), then the delivery (finished → claimed → delivered, acknowledged or
dropped; a dashed "awaiting delivery" while pending). Times come from the ledger row, the
result's per-child durations and the journal (``offload.owner.journal``); a unit still running
ends at ``now``. Pure: no I/O, no clock (``now`` is given). Every label is data the template
escapes; the same lanes are laid out twice, wide (labels beside the bars) and narrow (labels
above them, for a phone), and CSS shows the one that fits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offload.engine.states import UNFINISHED
from offload.ledger import JournalEntry
from offload.render.resumed import resume_note
from offload.render.state_style import TRUNCATED_WORD, child_mark, child_tone, tone

_STEPS_S = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600,
            12 * 3600, 86400, 2 * 86400, 7 * 86400)
TARGET_TICKS = 6
QUEUED_MIN_S = 0.5  # a unit that waited less before it ran shows no queued segment


@dataclass(frozen=True)
class Layout:
    """Where things go in the SVG's own units (its viewBox); the page scales it to the width."""

    name: str
    width: float
    label_w: float  # the label column; 0 puts each label above its bar
    lane_h: float
    top: float = 22.0  # room for the axis labels
    right: float = 14.0

    def x(self, at: float, t0: float, span_s: float) -> float:
        plot = self.width - self.label_w - self.right
        return round(self.label_w + plot * max(0.0, min(1.0, (at - t0) / span_s)), 1)


WIDE = Layout("wide", 1000.0, 190.0, 28.0)
NARROW = Layout("narrow", 400.0, 0.0, 40.0)


def _step(span_s: float) -> float:
    return next((s for s in _STEPS_S if span_s / s <= TARGET_TICKS), _STEPS_S[-1])


def offset_label(seconds: float) -> str:
    if seconds < 60:
        return f"+{seconds:g} s"
    if seconds < 3600:
        return f"+{seconds / 60:g} min"
    return f"+{seconds / 3600:g} h" if seconds < 86400 else f"+{seconds / 86400:g} d"


def lanes(unit: dict[str, Any], entries: list[JournalEntry], now: float) -> dict[str, Any]:
    """The lanes and marks of ``unit`` (``model.detail``'s dict) in seconds since dispatch."""
    resumed = unit.get("resumed") or {}
    # A resumed unit was dispatched again by its new owner: its axis starts at the first dispatch.
    t0 = min(t for t in (unit["dispatched_at"] or now, resumed.get("first_dispatched_at")) if t)
    running = unit["status"] in UNFINISHED
    finished_at = unit["completed_at"] if not running else None
    if finished_at is not None:  # a finished unit's drawing no longer moves: the axis ends at its last event
        now = max([finished_at, *(t for t in (unit.get("claimed_at"), unit.get("delivered_at")) if t)])
    end_at = finished_at or now
    started = next((e.at for e in entries if e.kind == "start" and e.child is None), None)
    ran_at = started if started is not None and started - t0 >= QUEUED_MIN_S and not resumed else t0
    cut = unit.get("truncated")  # children that stopped unfinished: the unit is not drawn plain green
    unit_lane = {"label": "unit", "tone": "warn" if cut else tone(unit["status"]), "start": ran_at, "end": end_at,
                 "word": f"{unit['status']}, {cut} {TRUNCATED_WORD}" if cut else unit["status"],
                 "open": running, "marks": _unit_marks(entries, finished_at, unit["status"], unit.get("resumed")),
                 "queued": (t0, ran_at) if ran_at > t0 else None}
    children = [_child_lane(child, entries, ran_at, finished_at, now) for child in unit["children"]]
    delivery = _delivery_lane(unit, finished_at, now)
    all_times = [end_at, *(m["at"] for lane in (unit_lane, *children, delivery) for m in lane["marks"]),
                 *(lane["end"] for lane in children)]
    return {"t0": t0, "t_end": max(all_times), "lanes": [unit_lane, *children, delivery]}


def _unit_marks(entries: list[JournalEntry], finished_at: float | None, status: str,
                resumed: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    marks = []
    starts = [e.at for e in entries if e.kind == "start" and e.child is None]
    if resumed and (resumed.get("after") or {}).get("last_write_at"):  # the dead owner's last sign of life
        after = resumed["after"]
        marks.append({"at": after["last_write_at"], "kind": "lost",
                      "label": f"owner pid {after.get('pid')} last seen (it died after this)"})
    resumed_at = (resumed or {}).get("at") or (starts[-1] if resumed and starts else None)
    if resumed_at:  # a new owner started it again after its owner died
        marks.append({"at": resumed_at, "kind": "resume", "label": resume_note(resumed)})
    for entry in entries:
        if entry.child is None and entry.kind == "stall":
            marks.append({"at": entry.at, "kind": "stall", "label": "stall warning: interrupted, grace begins"})
        elif entry.child is None and entry.kind == "interrupt":
            marks.append({"at": entry.at, "kind": "interrupt",
                          "label": f"interrupt ({entry.data.get('reason') or 'requested'})"})
    if finished_at is not None:
        marks.append({"at": finished_at, "kind": "finish", "label": f"finished: {status}"})
    return marks


def _child_end(child: dict[str, Any], entries: list[JournalEntry], t0: float, finished_at: float | None) -> float | None:
    ended = [e.at for e in entries if e.kind == "child_end" and e.child == child["index"]]
    if ended:
        return ended[-1]
    if isinstance(child.get("duration_s"), (int, float)):  # a resumed child's counts from its resume
        return ((child.get("resumed") or {}).get("at") or t0) + float(child["duration_s"])
    return finished_at


def _child_lane(child: dict[str, Any], entries: list[JournalEntry], t0: float, finished_at: float | None,
                now: float) -> dict[str, Any]:
    end = _child_end(child, entries, t0, finished_at) if child["status"] != "running" else None
    marks = []
    for entry in entries:
        if entry.child != child["index"]:
            continue
        for call in entry.data.get("tool_calls") or []:
            marks.append({"at": entry.at, "kind": "tool", "label": f"tool call: {call.get('name')}"})
        if entry.kind == "message" and entry.data.get("role") == "assistant" and not entry.data.get("tool_calls"):
            marks.append({"at": entry.at, "kind": "say", "label": "answer" if end is not None else "message"})
    resumed = child.get("resumed")
    if resumed and resumed.get("at"):  # where it continued after its owner died
        marks.append({"at": resumed["at"], "kind": "resume", "label": resume_note(resumed)})
    return {"label": f"#{child['number']} {child['goal']}", "tone": child_tone(child["status"], child),
            "word": child_mark(child["status"], child)[1],
            "start": t0, "end": end if end is not None else now, "open": end is None, "marks": marks}


def _delivery_lane(unit: dict[str, Any], finished_at: float | None, now: float) -> dict[str, Any]:
    state = unit["delivery_state"]
    marks = []
    if unit.get("claimed_at"):
        marks.append({"at": unit["claimed_at"], "kind": "claim", "label": "claimed by a consumer"})
    if unit.get("delivered_at") and state in ("delivered", "dropped"):
        marks.append({"at": unit["delivered_at"], "kind": state, "label": state})
    pending = finished_at is not None and state == "pending"
    return {"label": "delivery", "tone": tone(state) if finished_at is not None else "quiet",
            "word": "awaiting delivery" if pending else (state if finished_at is not None else "after the finish"),
            "start": finished_at or now, "end": now if pending else (unit.get("delivered_at") or finished_at or now),
            "open": pending, "marks": marks, "delivery": True}


def geometry(drawn: dict[str, Any], layout: Layout) -> dict[str, Any]:
    """``lanes()`` placed in ``layout``: bars, marks and axis ticks in SVG units."""
    t0, span_s = drawn["t0"], max(drawn["t_end"] - drawn["t0"], 1.0)
    step = _step(span_s)
    above = not layout.label_w  # narrow: each label on a line of its own, above its bar
    placed = []
    for number, lane in enumerate(drawn["lanes"]):
        y = layout.top + number * layout.lane_h
        bar_y, bar_h = (y + 15, layout.lane_h - 19) if above else (y + 7, layout.lane_h - 14)
        queued = lane.get("queued")
        placed.append({**lane, "y": y, "bar_y": bar_y, "bar_h": bar_h, "mid": bar_y + bar_h / 2,
                       "queued": queued and {"x1": layout.x(queued[0], t0, span_s), "x2": layout.x(queued[1], t0, span_s),
                                             "s": round(queued[1] - queued[0], 1)},
                       "label_y": y + 11 if above else bar_y + bar_h / 2 + 4, "x1": layout.x(lane["start"], t0, span_s),
                       "x2": max(layout.x(lane["end"], t0, span_s), layout.x(lane["start"], t0, span_s) + 2),
                       "marks": [{**m, "x": layout.x(m["at"], t0, span_s), "offset": offset_label(round(m["at"] - t0, 1))}
                                 for m in lane["marks"]]})
    ticks = [{"x": layout.x(t0 + k * step, t0, span_s), "label": offset_label(k * step) if k else "dispatch"}
             for k in range(int(span_s // step) + 1)]
    height = layout.top + len(placed) * layout.lane_h + 6
    return {"layout": layout, "lanes": placed, "ticks": ticks, "height": height}
