"""What the CLI prints: agent answers, delegation handles, landed results, and the tables
for ``/agents``, ``offload agents`` and ``offload inbox``.

Pure presentation over rich: builders return renderables from plain data, ``Ui`` prints.
Invariant: text that came from a model, a child or the ledger is never parsed as rich markup
(it is wrapped in ``Text`` or printed with ``markup=False``) and never reaches the terminal with
a control character in it (``offload.render.terminal.inert``: an escape sequence, a CR, a
bidirectional override are shown as ``\x1b``, ``\r``, ``\u202e``), and long lines are not
wrapped (``soft_wrap``), so ids and result lines stay intact in pipes and logs.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from rich.console import Console, Group, RenderableType
from rich.text import Text

from offload.ledger import LedgerRow
from offload.views import rows as ledger_rows
from offload.render.text import format_age
from offload.cli.result_summary import task_lines
from offload.cli.streams import same_destination
from offload.engine.events import is_interim
from offload.engine.states import child_state, unit_state
from offload.render.notification import async_delegation_display_text, stop_note
from offload.render.resumed import resume_note
from offload.render.state_style import TRUNCATED_WORD, child_mark, rich_style
from offload.render.terminal import inert

_GOAL_CHARS = 48


def _clip(text: Any, limit: int = _GOAL_CHARS) -> str:
    text = inert(" ".join(str(text or "").split()), keep_newlines=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _line(text: str, style: str = "") -> Text:
    """One line of a view: untrusted parts (ids, states, tools, reasons) made inert here too."""
    return Text(inert(text, keep_newlines=False), style=style)


def _seconds(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _colour_state(line: Text, start: int, word: str) -> Text:
    """Style the state ``word`` that starts at ``start`` of ``line`` in its tone (the dashboard's too)."""
    line.stylize(rich_style(word), start, start + len(word))
    return line


def _age(since: float | None, now: float) -> str:
    return format_age(max(0.0, now - since)) if since else "-"


# -- the live roster (in-process records) ---------------------------------------------------
def live_roster(items: list[dict[str, Any]]) -> RenderableType:
    """``list_async_delegations()`` as lines: one per unit, and while it runs one per child:
    done (status, time; from ``children_finished``) or running (API calls, current tool,
    seconds since its last activity)."""
    if not items:
        return Text("no background delegations in this session")
    lines = [Text(f"background delegations ({len(items)})", style="bold")]
    for item in items:
        label = f"group {item['group']}" if item.get("group") else item.get("goal")
        progress = item.get("seconds_since_progress")
        # The monitor's clock: seconds since a sweep last saw progress, compared to the stall limits.
        since = f"  (stall clock {_seconds(progress)} s)" if progress is not None else ""
        goals = item.get("goals") or []
        indexes = item.get("task_indexes") or list(range(len(goals))) or [0]
        finished = item.get("children_finished") or {}
        activities = item.get("children_activity") or []
        done = f"  children done {len(finished)}/{len(indexes)}" if activities else ""
        where = f"  ({item['where']})" if item.get("where") else ""  # a unit another process (a worker) has
        state, head = unit_state(item.get("status")), inert(f"  {item.get('delegation_id')}  ", keep_newlines=False)
        lines.append(_colour_state(_line(f"{head}{state}{done}  {_clip(label)}{since}{where}"), len(head), state))
        for position, activity in enumerate(activities):
            index = indexes[position] if position < len(indexes) else position
            goal = _clip(goals[index] if index < len(goals) else item.get("goal"))
            lines.append(_line(f"      #{index + 1}  {_child_state(finished.get(index), activity)}  {goal}", "dim"))
    for line in lines:  # one row per line whatever the width: cut the end rather than wrap
        line.no_wrap, line.overflow = True, "ellipsis"
    return Group(*lines)


def _child_state(entry: dict[str, Any] | None, activity: Any) -> str:
    """A finished child's outcome (its idle clock would only count up), else its live activity."""
    if entry is not None:
        mark, shown = child_mark(child_state(entry.get("status")), entry)
        took = entry.get("duration_seconds")
        return f"{mark} {shown:<9} in {_seconds(took)} s"
    activity = activity if isinstance(activity, dict) else {}
    return (f"… running   api calls {activity.get('api_calls', '?')!s:<3} tool {activity.get('current_tool') or '-':<12} "
            f"idle {_seconds(activity.get('seconds_since_activity')):>5} s{progress_note(activity)}")


def progress_note(activity: dict[str, Any]) -> str:
    """What a running child did last: its last finished tool call and the last line it wrote."""
    parts = []
    if activity.get("last_tool"):
        parts.append(f"last {activity['last_tool']}")
    if activity.get("last_text"):
        parts.append(f"“{_clip(activity['last_text'], 60)}”")
    return ("  " + "  ".join(parts)) if parts else ""


# -- ledger views (any process) ---------------------------------------------------------------
def _child_lines(rec: dict[str, Any]) -> list[Text]:
    lines = []
    for child in rec["children"]:
        took = f" {child['duration_s']:.1f} s" if child["duration_s"] is not None else ""
        mark, shown = child_mark(child_state(child["state"]), child)
        doing = ""
        if child.get("api_calls") is not None or child.get("current_tool"):  # published by its owner
            doing = (f"  api calls {child.get('api_calls', '?')!s} tool {child.get('current_tool') or '-'} "
                     f"idle {_seconds(child.get('seconds_since_activity'))} s{progress_note(child)}")
        lines.append(_line(f"      #{child['task']} {mark} {shown}{took}{doing}  {_clip(child['goal'])}", "dim"))
        if child.get("resumed"):  # continued after its owner died: one line saying how
            lines.append(_line(f"         {resume_note(child['resumed'])}", "cyan"))
    if rec.get("resumed") and not any(child.get("resumed") for child in rec["children"]):
        lines.append(_line(f"      {resume_note(rec['resumed'])}", "cyan"))  # taken over, its children still running
    return lines


def _ledger_rows(rows: Iterable[LedgerRow], title: str, status: Callable[[dict[str, Any]], str],
                 activity: dict[str, dict[str, Any]] | None = None, ledger: Any = None) -> RenderableType:
    """Per row: id and ``status(record)``; its session and task; one line per child."""
    records = [ledger_rows.record(row, (activity or {}).get(row.delegation_id), ledger) for row in rows]
    if not records:
        return Text(f"{title}: none")
    lines = [Text(f"{title} ({len(records)})", style="bold")]
    for rec in records:
        text, state, shown_id = status(rec), rec["state"], inert(rec["id"], keep_newlines=False)
        line = _line(f"  {shown_id}  {text}")
        lines.append(_colour_state(line, len(shown_id) + 4, state) if text.startswith(state) else line)
        lines.append(_line(f"      session {rec['session'] or '-'}  ·  {_clip(rec['label'])}", "dim"))
        lines.extend(_child_lines(rec))
    return Group(*lines)


def _done(rec: dict[str, Any]) -> str:
    children = rec["children"]
    return f"{sum(1 for c in children if c['state'] != 'running')}/{len(children)}"


def ledger_running(rows: Iterable[LedgerRow], now: float | None = None,
                   activity: dict[str, dict[str, Any]] | None = None, ledger: Any = None) -> RenderableType:
    """Running rows: age, owner (alive, or dead: it exited before the unit finished), children
    done; with ``activity`` (what owners published) the stall clock and how old that is."""
    now = time.time() if now is None else now

    def status(rec: dict[str, Any]) -> str:
        owner = {"running": "alive", "exited": "dead: `offload inbox` recovers it"}.get(rec["owner"] or "", "-")
        host = f" on {rec['owner_host']}" if rec.get("owner_host") else ""
        clock = ""
        if rec.get("activity_age_s") is not None:
            clock = (f"  stall clock {_seconds(rec['stall_clock_s'])} s"
                     f" (activity as of {_seconds(rec['activity_age_s'])} s ago)")
        return (f"running {_age(rec['dispatched_at'], now)}  owner {rec['owner_pid'] or '-'}{host} ({owner})  "
                f"children done {_done(rec)}{clock}")
    return _ledger_rows(rows, "running", status, activity, ledger)


def ledger_queued(rows: Iterable[LedgerRow], now: float | None = None, ledger: Any = None) -> RenderableType:
    """Queued rows, first queued first: their place, how long they wait, for whom (the owner
    that starts them, or ``offload worker``)."""
    now = time.time() if now is None else now
    place = iter(range(1, 1_000_000))

    def status(rec: dict[str, Any]) -> str:
        if not rec["owner_pid"]:
            who = "for an `offload worker`"
        else:
            fate = {"running": "alive", "exited": "dead: any live owner of this ledger starts it"}.get(rec["owner"] or "", "-")
            host = f" on {rec['owner_host']}" if rec.get("owner_host") else ""
            who = f"for a free slot of owner {rec['owner_pid']}{host} ({fate})"
        return f"queued {_age(rec['dispatched_at'], now)}  #{next(place)} in line  {who}"
    return _ledger_rows(rows, "queued", status, None, ledger)


def ledger_finished(rows: Iterable[LedgerRow], title: str, now: float | None = None) -> RenderableType:
    """Finished rows: state, when, delivery state and attempts; for a pending one, who delivers it."""
    now = time.time() if now is None else now

    def status(rec: dict[str, Any]) -> str:
        cut = sum(1 for child in rec["children"] if child.get("truncated"))
        state = f"{rec['state']} ({cut} {TRUNCATED_WORD})" if cut else rec["state"]
        why = stop_note({"stop_reason": rec.get("stop_reason"), "status": rec["state"],
                         "stalled_after_quiet_seconds": rec.get("stall_quiet_s")})
        text = (f"{state}{f' ({why})' if why else ''}  finished {_age(rec['completed_at'], now)} ago  "
                f"{rec['delivery_state']} (attempts {rec['delivery_attempts']})")
        if rec["delivery_state"] == "dropped" and rec.get("drop_reason"):
            return f"{text}  dropped: {rec['drop_reason']}"
        if rec["delivery_state"] != "pending":
            return text
        holder = rec.get("claimed_by")
        if holder:
            where = f"process {holder['pid']}" if holder.get("pid") else "a consumer"
            where += f" on {holder['host']}" if holder.get("host") else ""
            return f"{text}  being delivered by {holder['consumer']} ({where}) since {_age(holder['since'], now)} ago"
        # Whoever ran it, any consumer of its session delivers it (offload.engine.delivery).
        session = rec["session"] or "SESSION"
        return f"{text}  delivered by a running chat, run or gateway of its session, else `offload chat --resume {session}`"
    return _ledger_rows(rows, title, status)


def session_roster(items: list[dict[str, Any]], running: list[LedgerRow], pending: list[LedgerRow],
                   settled: list[LedgerRow], queued: list[LedgerRow] | None = None) -> RenderableType:
    """``/agents``: the units this process runs or holds queued (live), then the session's other
    delegations as the ledger has them — queued or run by another process, awaiting delivery,
    delivered — so a resumed chat shows its history too."""
    parts = [live_roster(items)] if items or not (running or pending or settled or queued) else []
    if queued:
        parts.append(ledger_queued(queued))
    if running:
        parts.append(ledger_running(running))
    if pending:
        parts.append(ledger_finished(pending, "awaiting delivery"))
    if settled:
        parts.append(ledger_finished(settled, "earlier in this session"))
    return Group(*parts)


def sessions_table(listed: Iterable[Any], pending: dict[str, int], now: float | None = None) -> RenderableType:
    """``offload sessions``: one line per stored session."""
    now = time.time() if now is None else now
    listed = list(listed)
    if not listed:
        return Text("no sessions yet; start one with `offload chat`")
    lines = [Text(f"sessions ({len(listed)}, most recent first)", style="bold")]
    for info in listed:
        waiting = f"  {pending[info.session_id]} result(s) pending" if pending.get(info.session_id) else ""
        lines.append(_line(f"  {info.session_id}  used {_age(info.updated_at, now)} ago  {info.message_count} "
                           f"message(s)  model {info.model or '-'}{waiting}"))
    return Group(*lines)


# -- printing ----------------------------------------------------------------------------------
READ_HINT_START = "  (the agent reads the full result"


def read_hint(delegation_id: str, inbox_command: str = "offload inbox", in_chat: bool = True) -> str:
    """Where the full text of a landed result can be read again."""
    chat = f"/show {delegation_id} in the chat or " if in_chat else ""
    return f"{READ_HINT_START}; see it with {chat}`{inbox_command} --show {delegation_id}`)"


def make_console(**options: Any) -> Console:
    """A console that is 160 columns wide when not a terminal, so tables stay readable in logs."""
    console = Console(highlight=False, **options)
    if not console.is_terminal and "width" not in options:
        console = Console(highlight=False, width=160, **options)
    return console


class Ui:
    """Console output of chat, run and the demo."""

    def __init__(self, console: Console | None = None, err_console: Console | None = None,
                 answers: Console | None = None, label_answers: bool = True,
                 read_hint: Callable[[str], str | None] = lambda delegation_id: read_hint(delegation_id)) -> None:
        self.console = console or make_console()
        self.err_console = err_console or make_console(stderr=True)
        self.answers = answers or self.console  # where the agent's answers go
        self.label_answers = label_answers
        self.read_hint = read_hint  # where a landed result can be read in full (None: nowhere that lasts)

    @classmethod
    def for_scripts(cls, answers_on_stdout: bool = True) -> Ui:
        """``offload run``: the agent's answers alone on stdout, everything else on stderr. When
        both end in one place (a terminal, ``2>&1``) the answers keep their ``agent>`` label, so
        the transcript reads as before. Without ``answers_on_stdout`` (``--json``), all on stderr."""
        err = make_console(stderr=True)
        if not answers_on_stdout:
            return cls(err, err)
        return cls(err, err, make_console(), label_answers=same_destination())

    def say(self, text: str, style: str | None = None) -> None:
        self.console.print(Text(inert(text), style=style or ""), soft_wrap=True)

    def answer(self, text: str | None, label: str = "agent") -> None:
        if label == "agent" and not self.label_answers:
            if text:
                self.answers.print(Text(inert(text)), soft_wrap=True)
            return
        # Both streams on one terminal: through the console a live roster draws on, which then
        # keeps the answer above the roster (printed beside it, a redraw or the roster's
        # clearing at its end would write over it).
        console = self.console if label != "agent" or self.console.is_terminal else self.answers
        console.print(Text.assemble((f"{label}> ", "bold cyan"), inert(text or "(no answer)")), soft_wrap=True)

    def handles(self, handles: list[dict[str, Any]]) -> None:
        for handle in handles:
            self.say(_describe_handle(handle), style="magenta")

    def result(self, event: dict[str, Any], text: str, full: bool = False) -> None:
        """A landed background result: a header, one line per task, and where the full text is.

        ``full`` prints exactly what the agent reads instead of the per-task lines."""
        delegation_id = event.get("delegation_id")
        origin = (" (from another process)" if event.get("settled_elsewhere")
                  else " (replayed from the ledger)" if event.get("restored") else "")
        if event.get("type") != "async_delegation":
            self.say(f"⇠ background {event.get('type')} landed{origin}", style="bold green")
            self.console.print(Text(inert(text), style="dim"), soft_wrap=True)
            return
        if is_interim(event):
            self._failure_notice(event)
            return
        title = async_delegation_display_text(event)
        why = stop_note(event)
        title += f" ({why})" if why else ""
        self.say(f"⇠ background result {delegation_id} landed{origin}: {title}", style="bold green")
        if full:
            self.console.print(Text(inert(text), style="dim"), soft_wrap=True)
            return
        notices = [line for line in text.splitlines() if line.startswith("⚠ ")]  # child text cannot forge one
        for line in [*notices, *task_lines(event)]:
            self.console.print(Text("  " + inert(line, keep_newlines=False)), soft_wrap=True)
        hint = self.read_hint(str(delegation_id))
        if hint:
            self.say(hint, style="dim")

    def _failure_notice(self, event: dict[str, Any]) -> None:
        """An early warning (once per unit): one task failed while its siblings still run."""
        self.say(f"⚠ background {event.get('delegation_id')}: a task failed while the others still run; "
                 "the full result follows when all are done", style="bold yellow")
        for line in task_lines(event):
            self.console.print(Text("  " + inert(line, keep_newlines=False)), soft_wrap=True)

    def error(self, text: str) -> None:
        """A failure: on stderr, so scripts reading stdout get only answers and results."""
        self.err_console.print(Text(inert(text), style="bold red"), soft_wrap=True)

    def warn(self, text: str) -> None:
        """Something the user should know that is not an answer (an interrupt, a stop): stderr."""
        self.err_console.print(Text(inert(text), style="yellow"), soft_wrap=True)

    def show(self, renderable: RenderableType) -> None:
        self.console.print(renderable)


def _unit_label(unit: dict[str, Any]) -> str:
    numbers = ", ".join(str(i + 1) for i in unit.get("task_indexes") or [])
    what = f"group {unit['group']}: task {numbers}" if unit.get("group") else f"task {numbers}"
    return f"{unit.get('delegation_id')} ({what})"


def _describe_handle(handle: dict[str, Any]) -> str:
    status = handle.get("status")
    if status == "dispatched":
        units = handle.get("units") or []
        if len(units) > 1:  # each unit reports on its own
            return (f"↳ delegated {handle.get('count', '?')} task(s) in the background, reporting in {len(units)} "
                    f"parts: {', '.join(_unit_label(u) for u in units)}")
        queued = " (queued: every background slot is busy; it starts when one frees)" if handle.get("state") == "queued" else ""
        return f"↳ delegated {handle.get('count', '?')} task(s) in the background: {handle.get('delegation_id')}{queued}"
    if status == "error":
        return f"↳ delegate_task refused: {handle.get('error')}"
    count = len(handle.get("results") or [])
    note = f" ({handle['note']})" if handle.get("note") else ""
    return f"↳ delegate_task ran {count} task(s) synchronously{note}"
