"""What the CLI prints: agent answers, delegation handles, landed results, and the tables
for ``/agents``, ``offload agents`` and ``offload inbox``.

Pure presentation over rich: builders return renderables from plain data, ``Ui`` prints.
Invariant: text that came from a model, a child or the ledger is never parsed as rich markup
(it is wrapped in ``Text`` or printed with ``markup=False``), and long lines are not wrapped
(``soft_wrap``), so ids and result lines stay intact in pipes and logs.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from rich.console import Console, Group, RenderableType
from rich.text import Text

from delegation.ledger import LedgerRow
from tools.notification_text import format_age
from tools.process_liveness import owner_alive
from tools.process_registry_notifications import async_delegation_display_text

_GOAL_CHARS = 48


def _clip(text: Any, limit: int = _GOAL_CHARS) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seconds(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _age(since: float | None, now: float) -> str:
    return format_age(max(0.0, now - since)) if since else "-"


# -- the live roster (in-process records) ---------------------------------------------------
def live_roster(items: list[dict[str, Any]]) -> RenderableType:
    """``list_async_delegations()`` as lines: one per unit, one per child while it runs
    (API calls, current tool, seconds since its last activity)."""
    if not items:
        return Text("no background delegations in this session")
    lines = [Text(f"background delegations ({len(items)})", style="bold")]
    for item in items:
        label = f"group {item['group']}" if item.get("group") else item.get("goal")
        progress = item.get("seconds_since_progress")
        # The monitor's clock: seconds since a sweep last saw progress, compared to the stall limits.
        since = f"  (stall clock {_seconds(progress)} s)" if progress is not None else ""
        lines.append(Text(f"  {item.get('delegation_id')}  {item.get('status')}  {_clip(label)}{since}"))
        goals = item.get("goals") or []
        indexes = item.get("task_indexes") or list(range(len(goals)))
        for position, activity in enumerate(item.get("children_activity") or []):
            index = indexes[position] if position < len(indexes) else position
            goal = _clip(goals[index] if index < len(goals) else "")
            if not isinstance(activity, dict):
                activity = {}
            lines.append(Text(f"      #{index + 1}  api calls {activity.get('api_calls', '?')!s:<3} "
                              f"tool {activity.get('current_tool') or '-':<12} "
                              f"idle {_seconds(activity.get('seconds_since_activity')):>5} s  {goal}", style="dim"))
    for line in lines:  # one row per line whatever the width: cut the end rather than wrap
        line.no_wrap, line.overflow = True, "ellipsis"
    return Group(*lines)


# -- ledger views (any process) ---------------------------------------------------------------
def _owner(row: LedgerRow) -> str:
    if not row.owner_pid:
        return "-"
    return f"{row.owner_pid} ({'alive' if owner_alive(row.owner_pid, row.owner_started_at) else 'dead'})"


def _children_recorded(row: LedgerRow) -> str:
    task = row.task or {}
    total = len(task.get("task_indexes") or task.get("goals") or []) or 1
    done = len((row.result or {}).get("results") or [])
    return f"{done}/{total}"


def _label(row: LedgerRow) -> str:
    task = row.task or {}
    return _clip(f"group {task['group']}" if task.get("group") else task.get("goal") or (row.event or {}).get("goal"))


def _ledger_rows(rows: Iterable[LedgerRow], title: str, status: Callable[[LedgerRow], str]) -> RenderableType:
    """Two lines per row: id and ``status(row)``; then its session and task."""
    rows = list(rows)
    if not rows:
        return Text(f"{title}: none")
    lines = [Text(f"{title} ({len(rows)})", style="bold")]
    for row in rows:
        lines.append(Text(f"  {row.delegation_id}  {status(row)}"))
        lines.append(Text(f"      session {row.parent_session_id or row.origin_session or '-'}  ·  {_label(row)}",
                          style="dim"))
    return Group(*lines)


def ledger_running(rows: Iterable[LedgerRow], now: float | None = None) -> RenderableType:
    """Running rows: age, owner (alive or dead), children finished so far."""
    now = time.time() if now is None else now
    return _ledger_rows(rows, "running", lambda row: f"running {_age(row.dispatched_at, now)}  owner {_owner(row)}  "
                                                   f"children done {_children_recorded(row)}")


def ledger_finished(rows: Iterable[LedgerRow], title: str, now: float | None = None) -> RenderableType:
    """Finished rows: state, when, delivery state and attempts, owner."""
    now = time.time() if now is None else now
    return _ledger_rows(rows, title, lambda row: f"{row.state}  finished {_age(row.completed_at, now)} ago  "
                                                f"{row.delivery_state} (attempts {row.delivery_attempts})  "
                                                f"owner {_owner(row)}")


# -- printing ----------------------------------------------------------------------------------
def make_console(**options: Any) -> Console:
    """A console that is 160 columns wide when not a terminal, so tables stay readable in logs."""
    console = Console(highlight=False, **options)
    if not console.is_terminal and "width" not in options:
        console = Console(highlight=False, width=160, **options)
    return console


class Ui:
    """Console output of chat, run and the demo."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or make_console()

    def say(self, text: str, style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""), soft_wrap=True)

    def answer(self, text: str | None, label: str = "agent") -> None:
        self.console.print(Text.assemble((f"{label}> ", "bold cyan"), text or "(no answer)"), soft_wrap=True)

    def handles(self, handles: list[dict[str, Any]]) -> None:
        for handle in handles:
            self.say(_describe_handle(handle), style="magenta")

    def result(self, event: dict[str, Any], text: str) -> None:
        """A landed background result: a header line, then exactly what the agent will read."""
        title = async_delegation_display_text(event) if event.get("type") == "async_delegation" else event.get("type")
        origin = " (replayed from the ledger)" if event.get("restored") else ""
        self.say(f"⇠ background result {event.get('delegation_id')} landed{origin}: {title}", style="bold green")
        self.console.print(Text(text, style="dim"), soft_wrap=True)

    def error(self, text: str) -> None:
        self.say(text, style="bold red")

    def show(self, renderable: RenderableType) -> None:
        self.console.print(renderable)


def _describe_handle(handle: dict[str, Any]) -> str:
    status = handle.get("status")
    if status == "dispatched":
        units = [u.get("delegation_id") for u in handle.get("units") or []]
        split = f" as units {', '.join(units)}" if units else ""
        return (f"↳ delegated {handle.get('count', '?')} task(s) in the background: "
                f"{handle.get('delegation_id')}{split}")
    if status == "error":
        return f"↳ delegate_task refused: {handle.get('error')}"
    count = len(handle.get("results") or [])
    note = f" ({handle['note']})" if handle.get("note") else ""
    return f"↳ delegate_task ran {count} task(s) synchronously{note}"
