"""Fake parent and child agents at our own seam (build_child / run_conversation)."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable


class FakeChild:
    def __init__(self, task_index: int, goal: str, behaviour: Callable[["FakeChild"], dict] | None = None, **kw: Any):
        self.task_index, self.goal, self.kw = task_index, goal, kw
        self.model = kw.get("model") or "child-model"
        self.behaviour = behaviour
        self.stop = threading.Event()
        self.prompts: list[str] = []
        self.api_calls = 0

    def run_conversation(self, user_message: str, history=None) -> dict:
        self.prompts.append(user_message)
        if self.behaviour is not None:
            return self.behaviour(self)
        return {"final_response": f"done: {self.goal}", "completed": True, "exit_reason": "completed",
                "api_calls": 1, "error": None, "interrupted": False}

    def interrupt(self, message: str | None = None) -> None:
        self.stop.set()

    def get_activity_summary(self) -> dict:
        return {"api_call_count": self.api_calls, "current_tool": None, "last_activity_ts": time.time()}


class FakeParent:
    def __init__(self, behaviour=None, session_id: str = "parent-sid", depth: int = 0):
        self.session_id = session_id
        self.model, self.base_url, self.api_key = "parent-model", "http://127.0.0.1:9/v1", "parent-key"
        self._delegate_depth = depth
        self._interrupt_requested = False
        self._active_children: list = []
        self._active_children_lock = threading.Lock()
        self.behaviour = behaviour
        self.built: list[FakeChild] = []

    def build_child(self, *, task_index: int, goal: str, **kw: Any) -> FakeChild:
        child = FakeChild(task_index, goal, self.behaviour, **kw)
        self.built.append(child)
        return child
