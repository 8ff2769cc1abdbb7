"""The live /agents roster: one chat message, edited in place while this chat's units run.

``roster_text(items)`` is pure (tests feed it engine listings); ``RosterBubble`` is the tiny
loop that re-renders and edits only when the text changed, then collapses the message to a
one-line summary when nothing of this chat is running any more.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from offload.engine.states import COMPLETED, LIVE_STATES, QUEUED, unit_state
from offload.gateway.platform import Platform, Route

logger = logging.getLogger(__name__)
HEADER = "Background agents"
LIVE = LIVE_STATES | {QUEUED}  # still to report: the bubble keeps following them
_PROGRESS = (("last_tool", "last"), ("last_text", "writing:"))  # what a child did last, as the chat's roster shows it


def roster_text(items: list[dict[str, Any]]) -> str:
    if not items:
        return "no background delegations in this chat"
    lines = []
    for item in items:
        goal = str(item.get("goal") or item.get("group") or "")[:80]
        lines.append(f"{item.get('delegation_id')} {unit_state(item.get('status'))}: {goal}")
        for n, activity in enumerate(item.get("children_activity") or [], 1):
            if isinstance(activity, dict):
                lines.append(f"  #{n} api calls {activity.get('api_calls', '?')}, tool {activity.get('current_tool') or '-'}"
                             + "".join(f", {label} {activity[key]}" for key, label in _PROGRESS if activity.get(key)))
    return "\n".join(lines)


def collapsed_text(items: list[dict[str, Any]]) -> str:
    done = sum(1 for i in items if unit_state(i.get("status")) == COMPLETED)
    return f"all {len(items)} background delegation(s) finished ({done} completed); results arrive in this chat"


class RosterBubble:
    def __init__(self, platform: Platform, route: Route, units: Callable[[], list[dict[str, Any]]],
                 interval_s: float, stop: threading.Event) -> None:
        self.platform, self.route, self.units, self.interval_s, self.stop = platform, route, units, interval_s, stop

    def start(self) -> None:
        items = self.units()
        ids = self.platform.send(self.route, roster_text(items), header=HEADER)
        if ids and any(i.get("status") in LIVE for i in items):
            threading.Thread(target=self._follow, args=(ids[0], roster_text(items)), daemon=True,
                             name=f"roster-{self.route.chat_id}").start()

    def _follow(self, message_id: str, shown: str) -> None:
        while not self.stop.wait(self.interval_s):
            items = self.units()
            live = any(i.get("status") in LIVE for i in items)
            text = roster_text(items) if live else collapsed_text(items)
            try:
                if text != shown:
                    self.platform.edit(self.route, message_id, text, header=HEADER)
                    shown = text
            except Exception as exc:
                logger.warning("roster edit in chat %s failed: %s", self.route.chat_id, exc)
            if not live:
                return
