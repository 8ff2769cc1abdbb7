"""How a resumed child is described (issue 44): the ``resumed`` value of the result document,
made from what ``offload.subagents.resume`` stored on a child's result entry (or on its unit's
ledger task while it runs), and the one line every text view prints for it.

Pure: no I/O, no clock. Invariant: one shape everywhere (``docs/vocabulary.md``); anything
malformed reads as null, never as a resume. The line carries ledger data (a host name, the tool
names a model chose), so a text view passes it through ``offload.render.terminal.inert`` like
any untrusted text, and the dashboard's templates escape it.
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Mapping

MARK = "↻"


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def owner_after(value: Any) -> dict[str, Any]:
    """The owner that died: ``{"pid", "host", "last_write_at"}`` (each null when not known)."""
    after = value if isinstance(value, Mapping) else {}
    host = after.get("host")
    return {"pid": _count(after.get("pid")), "host": str(host) if host else None,
            "last_write_at": _number(after.get("last_write_at"))}


def child_resumed(value: Any) -> dict[str, Any] | None:
    """A child entry's ``resumed`` as the document has it; None for a child that was not resumed."""
    if not isinstance(value, Mapping):
        return None
    unknown = value.get("unknown_calls") if isinstance(value.get("unknown_calls"), list) else []
    return {"resumes": _count(value.get("resumes")) or 1, "from_step": _count(value.get("from_step")) or 0,
            "after": owner_after(value.get("after")), "at": _number(value.get("at")),
            "model_calls_reissued": _count(value.get("model_calls_reissued")) or 0,
            "unknown_calls": [str(name) for name in unknown], "calls_rerun": _count(value.get("calls_rerun")) or 0,
            "replies_kept": _count(value.get("replies_kept")) or 0}


def unit_resumed(task: Any, children: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """A unit's ``resumed`` (``{"resumes", "after", "at", "first_dispatched_at"}``): from its ledger
    task's ``durable`` mark once a new owner took it over (so a unit still running says it too),
    else from its first resumed child (a document made from an event alone, which does not know
    when the unit was first dispatched: null). A resumed unit's own ``dispatched_at`` is when the
    new owner dispatched it again; ``first_dispatched_at`` is when it was first."""
    mark = task.get("durable") if isinstance(task, Mapping) else None
    if isinstance(mark, Mapping) and isinstance(mark.get("after"), Mapping):
        return {"resumes": _count(mark.get("resumes")) or 1, "after": owner_after(mark.get("after")),
                "at": _number(mark.get("at")), "first_dispatched_at": _number(mark.get("first_dispatched_at"))}
    first = next((c for c in children if c), None)
    return ({"resumes": first["resumes"], "after": first["after"], "at": first["at"], "first_dispatched_at": None}
            if first else None)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _died(after: Mapping[str, Any]) -> str:
    who = f"pid {after['pid']}" if after.get("pid") is not None else "its owner"
    where = f" on host {after['host']}" if after.get("host") else ""
    seen = after.get("last_write_at")
    when = (f", last seen {dt.datetime.fromtimestamp(seen, dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
            if seen else "")
    return f"{who}{where} died{when}"


def resume_note(info: Mapping[str, Any]) -> str:
    """``↻ resumed from step 7 after pid 1234 on host X died, last seen … UTC (1 model call
    re-issued; 1 call answered as unknown: run_command)`` for a child; a unit's (no step) says
    ``↻ resumed after …``."""
    times = f" {info['resumes']} times" if (info.get("resumes") or 1) > 1 else ""
    step = f" from step {info['from_step']}" if "from_step" in info else ""
    head = f"{MARK} resumed{times}{step} after {_died(info.get('after') or {})}"
    if "from_step" not in info:
        return head
    details = [f"{_plural(info.get('model_calls_reissued') or 0, 'model call')} re-issued"]
    unknown = info.get("unknown_calls") or []
    if unknown:
        details.append(f"{_plural(len(unknown), 'call')} answered as unknown: {', '.join(unknown)}")
    if info.get("calls_rerun"):
        details.append(f"{_plural(info['calls_rerun'], 'read-only call')} run again")
    return f"{head} ({'; '.join(details)})"
