"""One ``run_conversation`` call's state (``Run``, its time-stamped messages ``Stamped``) and the
result dict it ends in (``run_result``).

Invariant: the result always has every key callers read (``final_response``, ``completed``,
``exit_reason``, ``truncated``, ``usage`` …); a run that stopped without an answer gets a
progress note saying why and which tools ran, and usage the server never reported stays
unknown (None), never zero.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from offload.render.truncation import BUDGET_EXIT_REASON, COST_BUDGET_EXIT_REASON, CUT_OFF_EXIT_REASON, cut_off_reason


class Stamped(list):
    """A run's messages with the time each was added (``times``), for ``transcript``; the model
    is sent the plain messages, as before."""

    def __init__(self, messages: list[dict[str, Any]] = ()) -> None:
        super().__init__(messages)
        self.times = [time.time()] * len(self)

    def append(self, message: dict[str, Any]) -> None:
        self.times.append(time.time())  # before the message: a reader zips the two, never short of a time
        super().append(message)


@dataclass
class Run:
    """Mutable state of one ``run_conversation`` call."""

    messages: list[dict[str, Any]]
    api_calls: int = 0
    last_content: str | None = None  # latest non-blank assistant text, the partial answer
    answer: str | None = None  # the final reply's text, set only when the run completes
    finish_reason: str | None = None  # the provider's word for how the last reply ended
    tool_counts: Counter[str] = field(default_factory=Counter)
    usage: Counter[str] = field(default_factory=Counter)  # token counts, and cost_usd when reported
    usage_reported: bool = False  # some call's server reported usage; else the counts are unknown, not 0
    replies: int = 0  # model calls the server answered (a rejected or unanswered call is not one)
    failed_status: int | None = None  # the HTTP status of the error the run ended with, if any
    budget_notice: str | None = None  # why the run stopped at its token or cost budget


def run_result(run: Run, model: str, exit_reason: str, error: str | None, interrupt_message: str | None,
               tool_trace: list[dict[str, Any]]) -> dict[str, Any]:
    """The result dict ``run_conversation`` returns for ``run`` ended with ``exit_reason``."""
    if exit_reason == "completed":
        final = run.answer
    elif exit_reason == "error":
        final = run.last_content
    else:
        final = run.last_content or _progress_note(run, exit_reason, interrupt_message)
    return {
        "final_response": final,
        "completed": exit_reason == "completed",
        "exit_reason": exit_reason,
        "truncated": exit_reason == CUT_OFF_EXIT_REASON,
        "finish_reason": run.finish_reason,
        "api_calls": run.api_calls,
        "messages": run.messages,
        "error": error or run.budget_notice,
        "model": model,
        "interrupted": exit_reason == "interrupted",
        "usage": _usage_of(run),
        "tool_trace": tool_trace,
    }


# Why a run's tokens are unknown (``usage["unknown"]``), and how the totals count such runs apart.
NOT_REPORTED, REJECTED, NO_REPLY = "not_reported", "rejected", "no_reply"
UNKNOWN_TOTAL_KEYS = {NOT_REPORTED: "tokens_unreported", REJECTED: "tokens_rejected", NO_REPLY: "tokens_no_reply"}
_UNKNOWN_WORDS = {NOT_REPORTED: "whose server reported no usage", REJECTED: "rejected by the server; no usage",
                  NO_REPLY: "that got no reply from the server; no usage"}


def unknown_usage_note(totals: dict[str, Any]) -> str | None:
    """What a summary says about the runs ``totals`` counts apart (``UNKNOWN_TOTAL_KEYS``), else None."""
    parts = [f"{int(totals[key])} model run(s) {_UNKNOWN_WORDS[why]}"
             for why, key in UNKNOWN_TOTAL_KEYS.items() if totals.get(key)]
    return f"{', '.join(parts)} — not counted (unknown)" if parts else None


def unknown_reason(run: Run) -> str:
    """Why ``run`` has no usage: its server answered without any, or no call was answered at all
    (the server rejected it with an HTTP error, or never replied)."""
    if run.replies:
        return NOT_REPORTED
    return REJECTED if run.failed_status is not None else NO_REPLY


def _usage_of(run: Run) -> dict[str, Any]:
    """Tokens (and cost) the server reported for the run; None when no call reported usage
    (a server without usage reports, or one that answered no call), which is unknown, not zero."""
    if not run.usage_reported:
        unknown = {"unknown": unknown_reason(run)} if run.api_calls else {}
        return {"prompt_tokens": None, "completion_tokens": None, **unknown}
    usage: dict[str, Any] = {"prompt_tokens": run.usage["prompt_tokens"],
                             "completion_tokens": run.usage["completion_tokens"]}
    if "cost_usd" in run.usage:  # only when the provider reported one: unknown is not zero
        usage["cost_usd"] = run.usage["cost_usd"]
    return usage


def _progress_note(run: Run, exit_reason: str, interrupt_message: str | None) -> str:
    """What was done, for a run that stopped before the model gave any text."""
    if exit_reason == "interrupted":
        why = f"Interrupted ({interrupt_message})" if interrupt_message else "Interrupted"
    elif exit_reason == CUT_OFF_EXIT_REASON:
        why = f"The model's reply was cut off ({cut_off_reason(run.finish_reason)})"
    elif exit_reason == BUDGET_EXIT_REASON:
        why = "Stopped at the token budget"
    elif exit_reason == COST_BUDGET_EXIT_REASON:
        why = "Stopped at the cost budget"
    else:
        why = "Stopped at the iteration budget"
    if not run.tool_counts:
        return f"{why} after {run.api_calls} model call(s), before any tool ran and without a final answer."
    tools = ", ".join(f"{name} ×{count}" for name, count in run.tool_counts.items())
    return f"{why} after {run.api_calls} model call(s) without a final answer; tool calls made: {tools}."
