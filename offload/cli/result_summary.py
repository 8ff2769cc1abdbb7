"""The short human summary of a landed background result, for the terminal.

The model reads the full block (``format_process_notification``: instructions, every child's
whole summary); a person wants one line per task: outcome, goal, time and the first words of
the answer. Pure: reads only the event dict, no clock, no I/O. The full block is one command
away (``/show ID`` in the chat, ``offload inbox --show ID`` anywhere).
"""
from __future__ import annotations

from typing import Any

from offload.engine.states import COMPLETED, child_state
from offload.render.resumed import child_resumed, resume_note
from offload.render.state_style import child_mark

GOAL_CHARS = 60
ANSWER_CHARS = 100


def _line(text: Any, limit: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _entries(event: dict[str, Any]) -> list[dict[str, Any]]:
    results = event.get("results")
    if isinstance(results, list) and results:
        entries = [r for r in results if isinstance(r, dict)]
        return sorted(entries, key=lambda r: r.get("task_index") if isinstance(r.get("task_index"), int) else 0)
    indexes = [i for i in event.get("task_indexes") or range(len(event.get("goals") or [])) if isinstance(i, int)]
    if event.get("is_batch") and len(indexes) > 1:  # no child reported (a recovered unit): each shares its outcome
        return [{**event, "task_index": i} for i in indexes]
    return [event]  # a single-task unit carries its outcome at the top level


def task_lines(event: dict[str, Any]) -> list[str]:
    """One line per task: ``✓ 1/3 goal (completed, 1.2 s): first words of the answer``, and under
    a task that was resumed after its owner died, how (``↻ resumed from step 3 after …``)."""
    goals = event.get("goals") if isinstance(event.get("goals"), list) else []
    entries = _entries(event)
    total = max(len(goals), len(entries))
    lines = []
    for position, entry in enumerate(entries):
        index = entry.get("task_index") if isinstance(entry.get("task_index"), int) else position
        goal = goals[index] if 0 <= index < len(goals) else entry.get("goal") or event.get("goal")
        status = child_state(entry.get("status"))
        seconds = _number(entry.get("duration_seconds"))
        timing = f", {seconds:.1f} s" if seconds is not None else ""
        outcome = entry.get("summary") if status == COMPLETED else entry.get("error") or entry.get("summary")
        said = f": {_line(outcome, ANSWER_CHARS)}" if outcome else ""
        number = f"{index + 1}/{total} " if total > 1 else ""
        mark, shown = child_mark(status, entry)  # stopped unfinished: never a plain ✓
        lines.append(f"{mark} {number}{_line(goal, GOAL_CHARS)} ({shown}{timing}){said}")
        resumed = child_resumed(entry.get("resumed"))
        if resumed:
            lines.append(f"  {resume_note(resumed)}")
    return lines
