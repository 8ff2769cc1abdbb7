"""The arguments of ``delegate_task``: one pydantic model that validates them AND generates
the schema the model sees (``DELEGATE_TASK_SCHEMA``), so the two cannot drift.

Operator-only knobs (``toolsets`` overrides, ``max_iterations``) are accepted from trusted
callers but not advertised to the model: they are ``SkipJsonSchema`` fields. ``task_list()``
is the one place that turns the call into tasks and refuses placeholder goals, for single
and batch calls alike, before anything is built or dispatched.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from offload.subagents.goals import placeholder_goals_error
from offload.toolsets.function_schema import function_spec
from offload.toolsets.toolset_names import KNOWN_TOOLSETS


DESCRIPTION = (
    "Hand work to subagents. In the background (default) you get a handle at once and keep talking "
    "to the user; each result arrives later as a new message after you end your turn. Give each "
    "task a concrete, self-contained goal and the context it needs: a subagent sees nothing else.")


def _known_toolsets(value: list[str] | None) -> list[str] | None:
    unknown = [t for t in value or [] if t not in KNOWN_TOOLSETS]
    if unknown:
        raise ValueError(f"unknown toolset(s) {unknown}; choose from {list(KNOWN_TOOLSETS)}")
    return value


class TaskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    goal: str = Field(min_length=1, description="The concrete task for this subagent.")
    context: str | None = Field(None, description="Facts this subagent needs (overrides the call's context).")
    group: str | None = Field(None, description="Tasks sharing a group report back together.")
    toolsets: SkipJsonSchema[list[str] | None] = None

    @field_validator("goal")
    @classmethod
    def _goal_has_text(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("goal is empty; say what the subagent should do")
        return v.strip()

    @field_validator("toolsets")
    @classmethod
    def _toolsets_known(cls, v: list[str] | None) -> list[str] | None:
        return _known_toolsets(v)


class DelegateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    goal: str | None = Field(None, description="One self-contained task for a subagent (or use `tasks`).")
    context: str | None = Field(None, description="Facts the subagents need; they see nothing else.")
    tasks: list[TaskArgs] | None = Field(None, description="Several tasks run in parallel (instead of `goal`).")
    background: bool | None = Field(None, description=(
        "Run in the background (default): you get a handle now and each result arrives later as a "
        "new message after you end your turn. false: wait for the results in this turn."))
    role: Literal["leaf", "orchestrator"] | None = Field(None, description=(
        "leaf (default) does the work itself; orchestrator may delegate further, where allowed."))
    toolsets: SkipJsonSchema[list[str] | None] = None
    max_iterations: SkipJsonSchema[int | None] = Field(None, ge=1, le=10_000)

    @field_validator("toolsets")
    @classmethod
    def _toolsets_known(cls, v: list[str] | None) -> list[str] | None:
        return _known_toolsets(v)

    def task_list(self) -> list[TaskArgs]:
        """The call's tasks; raises ValueError for a malformed call or a placeholder goal."""
        if (self.goal is None) == (self.tasks is None):
            raise ValueError("pass exactly one of `goal` (one task) or `tasks` (several), not both or neither")
        if self.tasks is not None:
            if not self.tasks:
                raise ValueError("`tasks` is empty; give at least one {\"goal\": ...}")
            tasks = self.tasks
        else:
            tasks = [TaskArgs(goal=self.goal, context=self.context, toolsets=self.toolsets)]
        problem = placeholder_goals_error([t.goal for t in tasks], batch=self.tasks is not None)
        if problem:
            raise ValueError(problem)
        return tasks


DELEGATE_TASK_SCHEMA: dict[str, Any] = function_spec("delegate_task", DESCRIPTION, DelegateArgs)
