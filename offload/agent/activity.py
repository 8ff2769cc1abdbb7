"""The agent's liveness record, sampled by the stall monitor from another thread.

Owns ``ActivityTracker``: API-call count, the tool running now, and when anything last
happened. Invariant: every streamed chunk, API-call start/finish and tool start/end moves
``last_activity_ts`` forward, so a child streaming a long answer never looks stalled; reads and
writes take one tiny lock, so sampling is cheap and never sees a torn state.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable


class ActivityTracker:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._api_call_count = 0
        self._current_tool: str | None = None
        self._last_activity_ts = clock()

    def touch(self) -> None:
        with self._lock:
            self._last_activity_ts = self._clock()

    def api_call_started(self) -> None:
        with self._lock:
            self._api_call_count += 1
            self._last_activity_ts = self._clock()

    def tool_started(self, name: str) -> None:
        with self._lock:
            self._current_tool = name
            self._last_activity_ts = self._clock()

    def tool_finished(self) -> None:
        with self._lock:
            self._current_tool = None
            self._last_activity_ts = self._clock()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {
                "api_call_count": self._api_call_count,
                "current_tool": self._current_tool,
                "last_activity_ts": self._last_activity_ts,
            }
