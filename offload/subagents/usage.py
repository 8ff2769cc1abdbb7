"""Token and cost roll-up of subagents into their parent's totals.

A child's result entry carries ``tokens`` ({"input", "output"}; both None when its run has no
usage: unknown, never counted as 0, and ``unknown`` says why: ``not_reported`` by a server that
answered, ``rejected`` by the server with an HTTP error, ``no_reply``) and ``cost_usd`` (None when
the provider did not report a cost). Totals count such children apart, by why
(``tokens_unreported``, ``tokens_rejected``, ``tokens_no_reply``, present only when non-zero).
Children run inline (sync mode, or a unit that ran in place)
are added to the parent's totals when the tool returns; background children's usage travels
in their result entries and is added when the result is delivered (``roll_up_event``), so a
result is counted once, by the session that reads it.

The parent is duck-typed: anything with ``add_usage(mapping)`` is rolled into, anything else is
left alone (a parent that does not keep totals is not an error).
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from offload.agent.run_state import NOT_REPORTED, UNKNOWN_TOTAL_KEYS

logger = logging.getLogger(__name__)


def entry_usage_fields(out: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tokens`` / ``cost_usd`` fields of a result entry, from a child run's result. Tokens
    are None ("unknown") when the child made calls but its server reported no usage; a child
    whose endpoint could not be reached used none (0), it is not a server that kept quiet."""
    usage = out.get("usage") if isinstance(out.get("usage"), Mapping) else {}
    cost = usage.get("cost_usd")
    if usage.get("prompt_tokens") is None and usage.get("completion_tokens") is None and out.get("api_calls"):
        tokens: dict[str, Any] = {"input": None, "output": None, "unknown": usage.get("unknown") or NOT_REPORTED}
    else:
        tokens = {"input": _count(usage.get("prompt_tokens")), "output": _count(usage.get("completion_tokens"))}
    return {"tokens": tokens, "cost_usd": float(cost) if _is_number(cost) else None}


def sum_usage(entries: Iterable[Any]) -> dict[str, Any]:
    """Totals over result entries; ``cost_usd`` is None unless some child reported a cost."""
    total: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cost_usd": None}
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        tokens = entry.get("tokens") if isinstance(entry.get("tokens"), Mapping) else {}
        if "input" in tokens and tokens["input"] is None and tokens.get("output") is None:
            key = UNKNOWN_TOTAL_KEYS.get(tokens.get("unknown") or NOT_REPORTED, UNKNOWN_TOTAL_KEYS[NOT_REPORTED])
            total[key] = total.get(key, 0) + 1  # unknown: not counted as 0
        total["input_tokens"] += _count(tokens.get("input"))
        total["output_tokens"] += _count(tokens.get("output"))
        if _is_number(entry.get("cost_usd")):
            total["cost_usd"] = (total["cost_usd"] or 0.0) + float(entry["cost_usd"])
    return total


def event_usage(evt: Mapping[str, Any]) -> dict[str, Any]:
    """What a delivered completion event adds to its parent's totals."""
    results = evt.get("results")
    return sum_usage(results if isinstance(results, list) else [evt])


def roll_up(parent: Any, usage: Mapping[str, Any]) -> None:
    """Add ``usage`` to the parent's totals, if it keeps any. Never raises."""
    if not (usage.get("input_tokens") or usage.get("output_tokens") or usage.get("cost_usd")
            or any(usage.get(key) for key in UNKNOWN_TOTAL_KEYS.values())):
        return
    add = getattr(parent, "add_usage", None)
    if not callable(add):
        return
    try:
        add(dict(usage))
    except Exception:
        logger.warning("could not add subagent usage to the parent's totals", exc_info=True)


def roll_up_event(parent: Any, evt: Mapping[str, Any]) -> None:
    roll_up(parent, event_usage(evt))


def _count(value: Any) -> int:
    return int(value) if _is_number(value) and value > 0 else 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
