"""Refusing placeholder goals before anything is dispatched.

A model that fans out from a template ("TODO", ``<feature_name>``, "3", "task 2") would start
subagents that can only guess, burning budget on every one of them. ``goal_problem(goal)`` is
a pure check returning why a goal is not a task (or None). It is deliberately narrow (#81141):
only a goal that is *nothing but* a placeholder, a template marker, a bare number or a few
characters is refused, so ordinary goals that mention ``<div>`` or "TODO comments" still run.
"""
from __future__ import annotations

import re

MIN_GOAL_CHARS = 4

_PLACEHOLDER_WORDS = re.compile(
    r"(todo|tbd|tba|fixme|xxx|placeholder|lorem ipsum|goal|task|subtask|description|n/?a|none|null|"
    r"undefined|\.\.\.|…)", re.IGNORECASE)
_NUMBERED_STUB = re.compile(r"(task|goal|subtask|item|step|job|todo)?\s*#?\s*\d+(\.\d+)?", re.IGNORECASE)
# <feature_name>, <FEATURE>, {{ name }}, {task}, [TODO]: a slot someone forgot to fill.
_TEMPLATE_MARKER = re.compile(
    r"<[a-z]+(?:_[a-z0-9]+)+>|<[A-Z][A-Z0-9_]{2,}>|\{\{\s*[\w.]+\s*\}\}|\{[a-z]+(?:_[a-z0-9]+)+\}|"
    r"\[(?:TODO|TBD|FIXME|PLACEHOLDER|INSERT[\w ]*)\]")


def goal_problem(goal: str) -> str | None:
    """Why ``goal`` is a placeholder rather than a task, or None when it is a real goal."""
    text = " ".join(goal.split()).strip(" .:;!?-*\"'`")
    if _PLACEHOLDER_WORDS.fullmatch(text):
        return "is a placeholder, not a task"
    if _NUMBERED_STUB.fullmatch(text):
        return "is only a number or a numbered stub, not a task"
    marker = _TEMPLATE_MARKER.search(goal)
    if marker:
        return f"contains the unfilled template marker {marker.group(0)}"
    if len(text) < MIN_GOAL_CHARS:
        return f"is too short to be a task (under {MIN_GOAL_CHARS} characters)"
    return None


def placeholder_goals_error(goals: list[str], batch: bool) -> str | None:
    """One error naming every placeholder goal of a call, or None when all are real tasks."""
    problems = []
    for index, goal in enumerate(goals):
        problem = goal_problem(goal)
        if problem:
            where = f"tasks[{index}].goal" if batch else "goal"
            problems.append(f"{where} {goal!r} {problem}")
    if not problems:
        return None
    return ("nothing was dispatched: " + "; ".join(problems) + ". Write each goal as the concrete, "
            "self-contained task the subagent should do (fill in any template first).")
