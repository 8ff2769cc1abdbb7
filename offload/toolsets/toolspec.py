"""The shape every tool a child (or parent) agent can call shares.

A tool is plain data plus a handler: ``handler(args, ctx) -> str``. The handler returns the
text the model sees; it raises ``ToolError`` for a failure the model should read and act on
(bad path, timeout, interrupt; a non-zero exit code is a normal result). Handlers must poll ``ctx.interrupted`` at their natural
boundaries so an interrupt stops them promptly. Invariant: tools never import agent/.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from offload.engine.errors import OffloadError


class ToolError(OffloadError):
    """A tool failure worded for the model: what went wrong and what to do instead."""


@dataclass
class ToolContext:
    """What a running tool may touch: its workspace, the interrupt flag, its settings."""

    workspace: Path
    interrupted: threading.Event = field(default_factory=threading.Event)
    settings: dict[str, Any] = field(default_factory=dict)
    caller: Any = None  # the agent calling the tool; delegate_task needs its parent
    # A tool declared ``marks_effect`` calls this right before its effect begins (after any
    # approval was granted): a background child's step log writes the call's start mark then.
    effect_begins: Callable[[], None] = field(default=lambda: None)


@dataclass(frozen=True)
class Tool:
    name: str
    toolset: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    handler: Callable[[dict[str, Any], ToolContext], str]
    # Only looks (reads files, fetches a page): a background child's step log marks no start for
    # it, and a new owner may run it again. Every other tool is side-effecting (delegate_task too).
    read_only: bool = False
    # Calls ``ctx.effect_begins()`` itself right before its effect (e.g. after a person approved
    # the command), so a call that never got that far has no start mark and a new owner runs it
    # again (asking again); other side-effecting tools get the mark right before they are called.
    marks_effect: bool = False

    def schema(self) -> dict[str, Any]:
        """The Chat Completions ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }
