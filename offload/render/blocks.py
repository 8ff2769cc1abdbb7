"""The text blocks of an ``async_delegation`` notification: single task, batch/unit, interim
failure notice and crash-recovery lines.

Pure functions of the event dict (no I/O, no clock reads, no config reads -- the caller passes
in the model-rejection notice it computed). Every child-supplied value goes through
``offload.render.text.quote_block`` or ``inline``, so the only lines that start with a reserved
marker (``[ASYNC DELEGATION``, ``--- ``, ...) are the ones written here.
"""
from __future__ import annotations

from typing import Any

from offload.engine.states import CHILD_STATES, COMPLETED, child_state, event_state
from offload.render.truncation import is_truncated, truncated_note, truncated_suffix
from offload.render.text import (
    format_age,
    format_count,
    format_local_time,
    format_seconds,
    inline,
    is_number,
    quote_block,
)

SINGLE_INTRO = (
    "A background subagent you dispatched earlier has finished. You may have moved on since "
    "then, so the full task it was given is repeated below: act on the result, or re-dispatch "
    "the task if it is still needed."
)
BATCH_INTRO = (
    "A background fan-out unit ({unit}) you dispatched earlier has finished. Other units of the "
    "same call report separately. Act on these results or re-dispatch what failed; if you are "
    "still waiting on sibling units, end your turn after acting."
)
# The whole call in one unit: there are no sibling units to wait for, so none are mentioned.
WHOLE_CALL_INTRO = (
    "A background fan-out ({unit}) you dispatched earlier has finished. Act on these results or "
    "re-dispatch what failed."
)
INTERIM_INTRO = (
    "One task of a background fan-out failed while its sibling tasks are still running. This "
    "is an early warning: the consolidated results of the whole unit will follow when every "
    "task has finished. You can act on this failure now, e.g. re-dispatch just this task."
)
RECOVERY_NOTE = (
    "(before owner exit; not current liveness). Unrecorded outcomes remain unknown; inspect "
    "evidence before retrying side effects."
)


# -- event accessors (tolerant: events may come back from JSON or from older writers) -------

def event_results(evt: dict[str, Any]) -> list[dict[str, Any]]:
    """The event's child entries, sorted by ``task_index`` (position when it is missing)."""
    raw = evt.get("results")
    if not isinstance(raw, list):
        return []
    entries = [r for r in raw if isinstance(r, dict)]
    order = sorted(range(len(entries)), key=lambda pos: task_index(entries[pos], pos))
    return [entries[pos] for pos in order]


def event_goals(evt: dict[str, Any]) -> list[Any]:
    goals = evt.get("goals")
    return list(goals) if isinstance(goals, (list, tuple)) else []


def task_index(entry: dict[str, Any], fallback: int = 0) -> int:
    idx = entry.get("task_index")
    return idx if isinstance(idx, int) and not isinstance(idx, bool) and idx >= 0 else fallback


def goal_for(entry: dict[str, Any], goals: list[Any], fallback: Any = None) -> Any:
    idx = task_index(entry, -1)
    if 0 <= idx < len(goals):
        return goals[idx]
    return entry.get("goal") or fallback


def _status(value: Any) -> str:
    """The child state a status word means (offload.engine.states): a missing or foreign word
    reads ``unknown``, never success."""
    return child_state(value)


def _present(value: Any) -> bool:
    return value is not None and str(value).strip() != ""


# -- shared pieces ------------------------------------------------------------------------

def preamble(evt: dict[str, Any], title: str, intro: str, *, with_goal: bool) -> list[str]:
    lines = [title, intro, ""]
    dispatched = evt.get("dispatched_at")
    if is_number(dispatched):
        completed = evt.get("completed_at")
        age = format_age(completed - dispatched) if is_number(completed) else "?"
        lines.append(f"Dispatched: {format_local_time(dispatched)} ({age} ago)")
    if with_goal:
        lines.append(f"Original goal: {quote_block(evt.get('goal'))}")
    if _present(evt.get("context")):
        lines.append(f"Context you provided: {quote_block(evt['context'])}")
    toolsets = evt.get("toolsets")
    if isinstance(toolsets, (list, tuple)) and toolsets:
        lines.append("Toolsets: " + ", ".join(inline(t) for t in toolsets))
    elif _present(toolsets) and not isinstance(toolsets, (list, tuple)):
        lines.append(f"Toolsets: {inline(toolsets)}")
    lines.append(f"Role: {inline(evt.get('role')) or 'leaf'}   Model: {inline(evt.get('model')) or '?'}")
    return lines


def _indexed(mapping: Any) -> dict[str, Any]:
    return {str(k): v for k, v in mapping.items()} if isinstance(mapping, dict) else {}


def _index_order(key: str) -> tuple[int, int, str]:
    # isascii: "²".isdigit() is True but int("²") raises; the length cap keeps int() cheap.
    numeric = key.isascii() and key.isdigit() and len(key) < 19
    return (0, int(key), "") if numeric else (1, 0, key)


def recovery_lines(evt: dict[str, Any]) -> list[str]:
    """Evidence for a unit whose owner died; only when ``last_known_status`` is set."""
    if not _present(evt.get("last_known_status")):
        return []
    lines = [f"Last persisted unit status: {inline(evt['last_known_status'])} {RECOVERY_NOTE}"]
    transcripts = _indexed(evt.get("task_transcripts"))
    tails = _indexed(evt.get("transcript_tails"))
    for idx in sorted(set(transcripts) | set(tails), key=_index_order):
        label = inline(idx)
        if _present(transcripts.get(idx)):
            lines.append(f"Task index {label} transcript (may be incomplete): {inline(transcripts[idx])}")
        if _present(tails.get(idx)):
            lines += [
                f"--- last lines of task {label} transcript ---", quote_block(tails[idx]), "--- end ---",
            ]
    if _present(evt.get("git_state_hint")):
        lines.append(f"Owner working tree at recovery: {inline(evt['git_state_hint'])}")
    return lines


# -- single task ----------------------------------------------------------------------------

def single_block(evt: dict[str, Any], notice: list[str]) -> str:
    title = f"[ASYNC DELEGATION COMPLETE — {inline(evt.get('delegation_id')) or '?'}]"
    lines = preamble(evt, title, SINGLE_INTRO, with_goal=True)
    if notice:
        lines += ["", *notice]
    status, truncated = _status(evt.get("status")), is_truncated(evt)
    api_calls = format_count(evt.get("api_calls"), default="0")
    status_line = (
        f"Status: {status}   API calls: {api_calls}   "
        f"Duration: {format_seconds(evt.get('duration_seconds'))}s"
    )
    if truncated:
        status_line += f" [{truncated_suffix(evt)}]"
    lines += ["", status_line, "--- RESULT ---", *_single_body(evt, status, truncated)]
    return "\n".join(lines)


def _single_body(evt: dict[str, Any], status: str, truncated: bool) -> list[str]:
    summary, error = evt.get("summary"), evt.get("error")
    if status == COMPLETED and _present(summary):
        return ([truncated_note(evt)] if truncated else []) + [quote_block(summary)]
    if status == "interrupted":
        lines = [
            f"The subagent was interrupted before completing: {quote_block(error)}"
            if _present(error) else "The subagent was interrupted before completing."
        ]
    else:
        lines = [f"The subagent did not complete successfully (status={status})."]
        if _present(error):
            lines.append(quote_block(error))
        lines += recovery_lines(evt)
    if _present(summary):
        lines += ["Partial output:", quote_block(summary)]
    return lines


# -- batch / unit ---------------------------------------------------------------------------

def _unit_phrase(evt: dict[str, Any], results: list[dict[str, Any]]) -> str:
    indexes = evt.get("task_indexes")
    count = (len(indexes) if isinstance(indexes, list) else 0) or len(results) or len(event_goals(evt)) or 1
    phrase = f"{count} subagent" + ("" if count == 1 else "s")
    group = inline(evt.get("group"))
    return f"group '{group}' ({phrase})" if group else phrase


def _has_sibling_units(evt: dict[str, Any]) -> bool:
    """Whether the call was split into several units: this one runs only some of its tasks
    (``task_indexes`` is set only then)."""
    indexes = evt.get("task_indexes")
    return isinstance(indexes, list) and 0 < len(indexes) < len(event_goals(evt))


def _section(lines: list[str]) -> list[str]:
    return ["", *lines] if lines else []


def batch_block(evt: dict[str, Any], notice: list[str]) -> str:
    results, goals = event_results(evt), event_goals(evt)
    one_task = len(goals) <= 1 and not _has_sibling_units(evt)  # tasks=[{...}] with one task: no fan-out
    kind = "" if one_task else "BATCH "
    title = f"[ASYNC DELEGATION {kind}COMPLETE — {inline(evt.get('delegation_id')) or '?'}]"
    intro = SINGLE_INTRO if one_task else BATCH_INTRO if _has_sibling_units(evt) else WHOLE_CALL_INTRO
    lines = preamble(evt, title, intro.format(unit=_unit_phrase(evt, results)), with_goal=False)
    total = evt.get("total_duration_seconds")
    total = total if is_number(total) else evt.get("duration_seconds")
    lines[-1] += f"   Total duration: {format_seconds(total)}s" if is_number(total) else "   Total duration: unknown"
    lines.append(outcome_line(evt, results))
    error, recovery = evt.get("error"), recovery_lines(evt)
    if not results and _present(error):
        lines += _section(recovery)
        lines += ["", "--- ERROR ---", f"The batch did not complete successfully: {quote_block(error)}"]
        return "\n".join(lines)
    # Unlike the reference, a unit error that comes WITH results (a partly recovered unit) is
    # shown: it is the only line that says which outcomes are unknown.
    lines += _section(recovery + ([f"Unit error: {quote_block(error)}"] if _present(error) else []))
    lines += _section(notice)
    if not results:
        return "\n".join([*lines, "", "(no task results were recorded)"])
    n_tasks = max(len(goals) or len(results), *(task_index(r, pos) + 1 for pos, r in enumerate(results)))
    for pos, entry in enumerate(results):
        lines += ["", *task_block(entry, goals, n_tasks, pos)]
    return "\n".join(lines)


def outcome_line(evt: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """``Outcome: partial — 2 of 3 tasks completed, 1 interrupted``: the unit's state and how its
    children ended, in the words of ``offload.engine.states``."""
    state = event_state(evt)
    if not results:
        return f"Outcome: {state}"
    ended = [child_state(r.get("status")) for r in results]
    cut = sum(1 for r, s in zip(results, ended) if s == COMPLETED and is_truncated(r))
    done = f"{ended.count(COMPLETED)} of {len(ended)} task{'' if len(ended) == 1 else 's'} completed"
    done += f" ({cut} truncated: may be incomplete)" if cut else ""
    others = [f"{ended.count(s)} {s}" for s in CHILD_STATES if s != COMPLETED and s in ended]
    return f"Outcome: {state} — " + ", ".join([done, *others])


def task_block(entry: dict[str, Any], goals: list[Any], n_tasks: int, pos: int = 0) -> list[str]:
    idx, status, truncated = task_index(entry, pos), _status(entry.get("status")), is_truncated(entry)
    icon = "⚠" if truncated else ("✓" if status == COMPLETED else "✗")
    goal = inline(goal_for(entry, goals))
    details = [f"status={status}"]
    if is_number(entry.get("api_calls")):
        details.append(f"api_calls={format_count(entry['api_calls'])}")
    if is_number(entry.get("duration_seconds")):
        details.append(f"{format_seconds(entry['duration_seconds'])}s")
    if truncated:
        details.append(truncated_suffix(entry))
    head = f"--- {icon} TASK {idx + 1}/{n_tasks}" + (f": {goal}" if goal else "")
    lines = [f"{head}  ({', '.join(details)}) ---", *_task_body(entry, status, truncated)]
    if _present(entry.get("live_transcript")):
        transcript = inline(entry["live_transcript"])
        lines.append(f"Full live transcript (complete tool/assistant trace): {transcript}")
    return lines + process_lines(entry)


def _task_body(entry: dict[str, Any], status: str, truncated: bool) -> list[str]:
    summary, error = entry.get("summary"), entry.get("error")
    if status == COMPLETED and _present(summary):
        return ([truncated_note(entry)] if truncated else []) + [quote_block(summary)]
    if _present(summary):
        lines = [f"({status}: {inline(error)})"] if _present(error) else []
        return lines + ["Partial output:", quote_block(summary)]
    suffix = f": {inline(error)}" if _present(error) else ""
    return [f"(no summary — status={status}{suffix})"]


def _process_label(proc: Any) -> str:
    if not isinstance(proc, dict):
        return inline(proc) or "?"
    sid = inline(proc.get("session_id") or proc.get("id")) or "?"
    command = inline(proc.get("command"))
    return f"{sid} ({command})" if command else sid


def process_lines(entry: dict[str, Any]) -> list[str]:
    """Accounting for background processes the child started (handed off, killed, unread)."""
    lines: list[str] = []
    handed = entry.get("handed_off_processes")
    if isinstance(handed, list) and handed:
        labels = ", ".join(_process_label(p) for p in handed)
        lines.append(f"Handed off to you: {labels} (still running; you now own these processes).")
    orphaned = entry.get("orphaned_processes")
    if isinstance(orphaned, list) and orphaned:
        labels = ", ".join(_process_label(p) for p in orphaned)
        lines.append(
            f"Child left {len(orphaned)} background process(es) running that were TERMINATED "
            f"when it finished: {labels}."
        )
    unread = entry.get("unread_completions")
    for proc in unread if isinstance(unread, list) else []:
        info = proc if isinstance(proc, dict) else {}
        code = inline(info.get("exit_code")) or "?"
        tail = quote_block(info.get("output_tail") or info.get("output")) or "(empty)"
        lines.append(
            f"Child's process {_process_label(proc)} finished (exit {code}) but the child never "
            f"read its result; output tail:\n{tail}"
        )
    return lines


# -- interim per-task failure ---------------------------------------------------------------

def interim_block(evt: dict[str, Any]) -> str:
    results = event_results(evt)
    entry = results[0] if results else {}
    goals = event_goals(evt)
    idx = task_index(entry)
    n_tasks = format_count(evt.get("n_tasks"), default=str(len(goals) or 1))
    error = inline(entry.get("error") or evt.get("error")) or "(no error reported)"
    delegation_id = inline(evt.get("delegation_id")) or "?"
    duration = format_seconds(entry.get("duration_seconds"))
    lines = [
        f"[ASYNC DELEGATION TASK FAILED — {delegation_id}, task {idx + 1}/{n_tasks}]",
        INTERIM_INTRO,
        "",
        f"Task: {quote_block(goal_for(entry, goals, evt.get('goal')))}",
        f"Status: {_status(entry.get('status'))}   Duration: {duration}s",
        f"Error: {error[:400]}",
    ]
    transcript = entry.get("live_transcript") or evt.get("live_transcript")
    if _present(transcript):
        lines.append(f"Live transcript: {inline(transcript)}")
    return "\n".join(lines)
