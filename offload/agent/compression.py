"""Context compression: when a conversation nears the model's context limit, old turns are
summarised and the conversation continues in a NEW session whose lineage points back.

Owns the pure decision (``needs_compression``), the split (``split_for_compression``: never
between an assistant's tool calls and their results) and the rewrite (``compressed_history``);
``summarize`` asks the agent's own model for the summary. The caller (offload.runtime) stores
the new session and its lineage in one transaction, so results of delegations dispatched
before compression find the live session at the tip of the lineage.

Sizes are estimated at ``CHARS_PER_TOKEN`` characters per token: deterministic, and good
enough to stay clear of a limit that is itself a round number.
"""
from __future__ import annotations

import json
from typing import Any, Protocol

CHARS_PER_TOKEN = 4
KEEP_USER_TURNS = 1  # the most recent user turn (with its answer and tool calls) is kept verbatim
SUMMARY_HEADER = "[CONTEXT SUMMARY — earlier turns of this conversation, compressed]"
SUMMARIZER_PROMPT = (
    "You compress conversations. Summarise the transcript below for the assistant who will continue "
    "it: the user's goals, decisions made, facts learned, files and commands involved, background "
    "delegations started (with their delegation ids) and what is still open. Be complete but brief.")

Message = dict[str, Any]


class Summarizer(Protocol):
    def stream_turn(self, messages: list[Message], tools: Any, **kw: Any) -> Any: ...


def estimate_tokens(messages: list[Message]) -> int:
    return sum(len(json.dumps(m, ensure_ascii=False, default=str)) for m in messages) // CHARS_PER_TOKEN


def needs_compression(history: list[Message], incoming: str, window_tokens: int | None, at_ratio: float) -> bool:
    """Whether the next request (history plus the incoming message) would pass the threshold."""
    if not window_tokens:
        return False
    size = estimate_tokens(history) + len(incoming) // CHARS_PER_TOKEN
    return size >= window_tokens * at_ratio and split_for_compression(history)[1] != []


def split_for_compression(history: list[Message]) -> tuple[list[Message], list[Message], list[Message]]:
    """(system messages, turns to summarise, turns to keep); nothing to summarise -> middle []."""
    system = [m for m in history[:1] if m.get("role") == "system"]
    body = history[len(system):]
    user_at = [i for i, m in enumerate(body) if m.get("role") == "user"]
    if len(user_at) <= KEEP_USER_TURNS:
        return system, [], body
    cut = user_at[-KEEP_USER_TURNS]  # a user message starts a turn: tool calls stay with their results
    return system, body[:cut], body[cut:]


def compressed_history(history: list[Message], summary: str) -> list[Message]:
    system, _, keep = split_for_compression(history)
    note = {"role": "user", "content": f"{SUMMARY_HEADER}\n{summary.strip()}"}
    ack = {"role": "assistant", "content": "Understood; I will continue from that summary."}
    return [*system, note, ack, *keep]


def summarize(llm: Summarizer, old_turns: list[Message]) -> str:
    """The model's summary of ``old_turns``; raises what the client raises (the caller decides)."""
    transcript = "\n".join(f"{m.get('role')}: {_text_of(m)}" for m in old_turns)
    turn = llm.stream_turn([{"role": "system", "content": SUMMARIZER_PROMPT},
                            {"role": "user", "content": f"Summarise this conversation:\n\n{transcript}"}], None)
    text = (getattr(turn, "content", "") or "").strip()
    if not text:
        raise ValueError("the model returned an empty summary")
    return text


def _text_of(message: Message) -> str:
    content = message.get("content")
    calls = message.get("tool_calls") or []
    parts = [content if isinstance(content, str) else ""]
    parts += [f"[calls {c.get('function', {}).get('name')}({c.get('function', {}).get('arguments')})]" for c in calls]
    return " ".join(p for p in parts if p)
