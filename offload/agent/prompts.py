"""System prompts for top-level agents and for subagents.

Owns the wording only. Invariants: a subagent prompt always tells the child it is a focused
subagent that must end with a concise final summary of what it did and found, because that
final answer is the only thing the parent receives; and it never repeats the parent's
``context``, which reaches the child once, in its task message
(``offload.subagents.child.child_prompt``); given its tools, it names them and what it cannot do.
"""
from __future__ import annotations

from pathlib import Path


def default_system_prompt(workspace: Path) -> str:
    return (
        "You are a capable assistant that uses tools to get work done. "
        f"Your workspace directory is {workspace}. Prefer acting with tools over guessing; "
        "when you are done, answer concisely."
    )


def subagent_system_prompt(
    *, goal: str, context: str | None, task_index: int, role: str, workspace: Path, tools: list[str] | None = None,
) -> str:
    """``task_index`` counts from 0; the prompt numbers the task from 1, as every result does."""
    parts = [
        f"You are a focused subagent (task #{task_index + 1}) working for a parent agent. "
        "Do only the task below; the parent cannot see your tool calls or intermediate messages.",
        f"Your workspace directory is {workspace}.",
        f"TASK:\n{goal}",
    ]
    if context and context.strip():
        # Only a pointer: the context itself comes once, with the task message (a 24k-word
        # context sent in both places doubled every child's prompt).
        parts.append("The parent's context for this task comes with the task message.")
    if tools is not None:
        parts.append(
            f"Your tools (role {role}): {', '.join(tools) or 'none'}. You run unattended: you cannot ask the user "
            "or the parent anything, message anyone, or start work that outlives you, and offload's own home "
            "(its config, database and logs) is off limits. If something blocks you, say so in your final answer."
        )
    if role == "orchestrator":
        parts.append(
            "You may split the work with the delegate_task tool; wait for your workers' results "
            "and combine them before you answer."
        )
    parts.append(
        "When you are finished, reply with a concise final summary of what you did and what you "
        "found (results, file paths, commands, open problems). That final message is all the "
        "parent receives, so make it self-contained."
    )
    return "\n\n".join(parts)
