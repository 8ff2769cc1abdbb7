"""Truncated results: which ones are, and the words that say so wherever a result is shown.

A result is truncated when the work stopped before it was finished: the subagent hit its
iteration budget (``exit_reason`` "max_iterations", the reference's case), or the model's reply
was cut off (``exit_reason`` "truncated": finish_reason ``length`` or ``content_filter``, or a
stream that ended without a finish_reason). Invariant: every surface (the rendered block, the
terminal summary, the exit code of ``offload run``) asks ``is_truncated`` and never shows such
a result as plainly complete. Pure: no I/O.
"""
from __future__ import annotations

from typing import Any, Mapping

MAX_ITERATIONS_SUFFIX = "TRUNCATED: hit max_iterations — work may be incomplete"
MAX_ITERATIONS_NOTE = (
    "[TRUNCATED — subagent hit its iteration cap; the summary below may be incomplete. "
    "Verify before relying on it, or re-dispatch the unfinished part.]"
)
CUT_OFF_EXIT_REASON = "truncated"
UNFINISHED_EXIT_REASONS = ("max_iterations", CUT_OFF_EXIT_REASON)  # a run that stopped before it was done
# A subagent stopped at its delegation's token budget (or its cost budget, or a cost that was not
# reported under a cost cap): state ``interrupted``, its text so far kept as partial output, its
# ``error`` the notice (offload.subagents.budget). Not "truncated": not completed.
BUDGET_EXIT_REASON = "token_budget"
COST_BUDGET_EXIT_REASON = "cost_budget"
BUDGET_EXIT_REASONS = (BUDGET_EXIT_REASON, COST_BUDGET_EXIT_REASON)


def cut_off_reason(finish_reason: Any) -> str:
    """Why a reply counts as cut off, in words a user can act on."""
    if finish_reason == "length":
        return "finish_reason=length: it reached the output token limit of the model or server"
    if finish_reason == "content_filter":
        return "finish_reason=content_filter: the provider's content filter stopped it"
    return "the stream ended without a finish_reason, so the reply may be incomplete"


def unfinished_reason(exit_reason: Any, finish_reason: Any) -> str | None:
    """Why an agent turn's answer is incomplete (None when it is not), for the person reading it."""
    if exit_reason == "max_iterations":
        return "the agent used its whole iteration budget (max_iterations) before it finished"
    if exit_reason == CUT_OFF_EXIT_REASON:
        return f"the model's reply was cut off ({cut_off_reason(finish_reason)})"
    return None


def is_truncated(entry: Mapping[str, Any]) -> bool:
    return bool(entry.get("truncated")) or entry.get("exit_reason") in UNFINISHED_EXIT_REASONS


def _cut_off(entry: Mapping[str, Any]) -> bool:
    return entry.get("exit_reason") == CUT_OFF_EXIT_REASON


def truncated_suffix(entry: Mapping[str, Any]) -> str:
    """The short marker on a truncated result's status line or task header."""
    if _cut_off(entry):
        said = entry.get("finish_reason")
        said = said if said in ("length", "content_filter") else "no finish_reason"  # the client's "missing" too
        return f"TRUNCATED: the model's reply was cut off ({said}) — incomplete"
    return MAX_ITERATIONS_SUFFIX


def cut_off_advice(finish_reason: Any) -> str:
    """What to do about a reply cut off for ``finish_reason``: only a length limit is raised."""
    if finish_reason == "length":
        return "Re-dispatch with a shorter expected answer, or raise the server's output token limit."
    if finish_reason == "content_filter":
        return "Re-dispatch the task reworded, or with a model whose filter allows it."
    return ("The server or a proxy between ended the stream early (a restart, a timeout or a dropped "
            "connection); re-dispatch the task, and check the server's log if it happens again.")


def truncated_note(entry: Mapping[str, Any]) -> str:
    """The line above a truncated result's summary: what happened and what to do."""
    if _cut_off(entry):
        finish_reason = entry.get("finish_reason")
        return (f"[TRUNCATED — the subagent's last reply was cut off ({cut_off_reason(finish_reason)}); "
                f"the summary below is incomplete. {cut_off_advice(finish_reason)}]")
    return MAX_ITERATIONS_NOTE
