"""Owner-death recovery: turn a ``running`` row whose owner died into an ``unknown`` event.

Child execution is never resumed: a dead owner's side effects cannot be proven either way.
What is known is kept: every child the unit recorded durably before the death keeps its
real result; the others are reported ``unknown``. The event carries what the parent needs
to continue without opening files (the task source, transcript tails, the working tree).
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from offload.engine.events import event_base, unit_task_indexes
from offload.ledger import LedgerRow

NO_RESULT_ERROR = "Delegation owner exited before recording a terminal result; outcome unknown."
_TAIL_LINES, _TAIL_CHARS = 20, 2000


def recovered_event(row: LedgerRow, now: float, git_hint: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build ``(event, result)`` for an abandoned row."""
    task = row.task or {}
    is_batch = bool(task.get("is_batch"))
    results, recorded = _recovered_results(row, task)
    if results:
        error = (f"Delegation owner exited before the unit finished; {recorded}/{len(results)} child results "
                 "were recorded and are included below, the rest are unknown.")
    else:
        error = NO_RESULT_ERROR
    origin = row.origin  # the one the unit was dispatched for (an older row: from its columns)
    evt = event_base({**task, **origin.flat(), "origin": origin.to_json(), "delegation_id": row.delegation_id,
                      "dispatched_at": row.dispatched_at, "completed_at": now}, "unknown")
    evt.update(model=task.get("model"), summary=None, error=error, is_batch=is_batch, goals=task.get("goals") or [],
               last_known_status=row.state)
    for key in ("group", "task_indexes"):
        if task.get(key):
            evt[key] = task[key]
    transcripts = task.get("task_transcripts") or {}
    if transcripts:
        evt["task_transcripts"] = transcripts
        evt["transcript_tails"] = {i: t for i, p in transcripts.items() if (t := transcript_tail(p))}
    if git_hint:
        evt["git_state_hint"] = git_hint
    if results:
        evt["results"] = results
    result = {"results": results, "error": error} if is_batch or results else {"status": "unknown", "error": error}
    return evt, result


def _recovered_results(row: LedgerRow, task: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    recorded = {r.get("task_index"): r for r in ((row.result or {}).get("results") or []) if isinstance(r, dict)}
    if not recorded:
        return [], 0
    unknown = "Owner process exited before this child finished; its outcome is unknown."
    results = [recorded.get(i) or {"task_index": i, "status": "unknown", "summary": None, "error": unknown}
               for i in unit_task_indexes(task)]
    return results, sum(1 for i in unit_task_indexes(task) if i in recorded)


def transcript_tail(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 8 * _TAIL_CHARS))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    return "\n".join(text.splitlines()[-_TAIL_LINES:])[-_TAIL_CHARS:] or None


def git_state_hint(cwd: str | None) -> str | None:
    """``<branch> @ <sha subject> (<N> uncommitted file(s)) in <cwd>``, or None outside a repo."""
    if not cwd or not Path(cwd).is_dir():
        return None

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", cwd, *args], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    head = git("log", "-1", "--format=%h %s")
    if head is None:
        return None
    branch = git("rev-parse", "--abbrev-ref", "HEAD") or "?"
    dirty = len((git("status", "--porcelain") or "").splitlines())
    return f"{branch} @ {head} ({dirty} uncommitted file(s)) in {cwd}"
