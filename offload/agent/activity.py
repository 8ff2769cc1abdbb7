"""The agent's liveness record, sampled by the stall monitor and the rosters from another thread.

Owns ``ActivityTracker``: API-call count, the tool running now, when anything last happened,
the tail of the text the model is writing, and the trace of this run's tool calls (tool, a
summary of its arguments, outcome, seconds). Invariant: every streamed chunk, API-call
start/finish and tool start/end moves ``last_activity_ts`` forward, so a child streaming a long
answer never looks stalled; reads and writes take one tiny lock, so sampling is cheap and never
sees a torn state; the trace keeps at most ``MAX_TRACE`` steps (the latest) and counts the rest.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

MAX_TRACE = 100  # tool steps kept per run; older ones are counted in ``dropped``
TEXT_TAIL_CHARS = 240  # of the text being written, what a roster line may show
ARGS_CHARS = 80  # a tool call's argument summary


def summarize_args(args: Any, limit: int = ARGS_CHARS) -> str:
    """A one-line summary of a tool call's arguments: ``key=value`` pairs, each value as compact
    JSON, cut at ``limit`` characters with "…"."""
    if not isinstance(args, dict):
        text = str(args)
    else:
        text = " ".join(f"{k}={_compact(v)}" for k, v in args.items())
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value[:200], ensure_ascii=False)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)[:200]
    except (TypeError, ValueError):
        return str(value)[:200]


def last_line(text: str | None, limit: int = 100) -> str | None:
    """The last non-blank line of ``text``, cut at ``limit`` from its end; None if there is none."""
    for line in reversed((text or "").splitlines()):
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else "…" + line[-(limit - 1):]
    return None


class ActivityTracker:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._api_call_count = 0
        self._current_tool: str | None = None
        self._tool_started_at: float | None = None
        self._tool_args = ""
        self._last_activity_ts = clock()
        self._text_tail = ""
        self._trace: list[dict[str, Any]] = []
        self._dropped = 0
        self._step_notes: dict[str, Any] = {}  # what the running tool adds to its trace step (an approval)

    def begin_run(self) -> None:
        """A new conversation turn: its trace and text start empty."""
        with self._lock:
            self._trace, self._dropped, self._text_tail = [], 0, ""

    def touch(self) -> None:
        with self._lock:
            self._last_activity_ts = self._clock()

    def text(self, tail: str) -> None:
        """The model's answer so far (its tail), as it streams."""
        with self._lock:
            self._text_tail = tail[-TEXT_TAIL_CHARS:]
            self._last_activity_ts = self._clock()

    def api_call_started(self) -> None:
        with self._lock:
            self._api_call_count += 1
            self._last_activity_ts = self._clock()

    def tool_started(self, name: str, args: str = "") -> None:
        with self._lock:
            self._current_tool, self._tool_args, self._step_notes = name, args, {}
            self._last_activity_ts = self._tool_started_at = self._clock()

    def note_step(self, **fields: Any) -> None:
        """Facts of the running tool call for its trace step (e.g. ``approval={...}``)."""
        with self._lock:
            self._step_notes.update(fields)

    def tool_finished(self, outcome: str = "ok") -> None:
        """The tool that was running ended: ``ok`` or ``error`` (the model read an error)."""
        with self._lock:
            now = self._clock()
            if self._current_tool is not None:
                started = self._tool_started_at if self._tool_started_at is not None else now
                self._trace.append({"tool": self._current_tool, "args": self._tool_args, "outcome": outcome,
                                    "seconds": round(max(0.0, now - started), 2), **self._step_notes})
                if len(self._trace) > MAX_TRACE:
                    del self._trace[0]
                    self._dropped += 1
            self._current_tool, self._tool_started_at, self._tool_args = None, None, ""
            self._step_notes = {}
            self._last_activity_ts = now

    def trace(self) -> dict[str, Any]:
        """This run's tool calls in order (the last ``MAX_TRACE``) and how many earlier ones were dropped."""
        with self._lock:
            return {"steps": [dict(step) for step in self._trace], "dropped": self._dropped}

    def summary(self) -> dict[str, Any]:
        with self._lock:
            last = self._trace[-1] if self._trace else None
            return {
                "api_call_count": self._api_call_count,
                "current_tool": self._current_tool,
                "last_activity_ts": self._last_activity_ts,
                "last_text": last_line(self._text_tail),
                "last_tool": dict(last) if last else None,
            }
