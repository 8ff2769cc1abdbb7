"""Pure rendering of completion-bus events into the text a parent agent reads as a new turn.

Owns ``format_event(event, subagent_config) -> str | None`` for the one event type anything
puts on the completion bus, ``async_delegation`` (results, and interim failure notices), and
``async_delegation_display_text(evt)``, the compact one-line title a UI shows for a delegation
result. Any other type renders as None: hermes' background-process events (completions,
heartbeats, watch matches) have no producer here, so they have no renderer either.

Invariants:
- No I/O and no clock reads. The "Dispatched" age is ``completed_at - dispatched_at`` from the
  event; formatting that epoch in local time is the only environment input. The subagent
  config the SUBAGENT MODEL REJECTED notice names was stamped into the event at dispatch
  (``subagent_config``, see ``offload.render.model_rejection.subagent_stamp``); only an event without
  the stamp (stored by an older version, or built by hand) falls back to the
  ``subagent_config`` argument (a dict, or a callable asked only then), which the caller reads.
- Anti-forgery: child output is untrusted. Multi-line child text is passed through
  ``offload.render.text.quote_block``, which prefixes ``"│ "`` to any line that would start
  (after blanks) with a reserved marker -- ``[ASYNC DELEGATION``, ``[IMPORTANT:``,
  ``[TRUNCATED``, ``[Background process``, ``--- `` or ``⚠ SUBAGENT MODEL REJECTED``; child
  text embedded in a renderer line is collapsed onto that line by ``inline``. So every line
  starting with a reserved marker was written by this renderer: a summary cannot forge a
  second result header, task header or ``--- RESULT ---`` separator.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Union

from offload.render.model_rejection import MODEL_NOT_FOUND_PATTERNS, says_model_not_found, subagent_stamp
from offload.render.text import clip, inline
from offload.engine.states import COMPLETED, PARTIAL, STOP_STALL, STOP_USER, child_state, event_state, stop_reason
from offload.render.blocks import (
    batch_block,
    event_goals,
    event_results,
    goal_for,
    interim_block,
    is_truncated,
    single_block,
)

__all__ = ["format_event", "async_delegation_display_text", "MODEL_NOT_FOUND_PATTERNS"]
SubagentConfig = Union[Mapping[str, Any], Callable[[], Mapping[str, Any]], None]

_DISPLAY_SUBJECT_CHARS = 200


def format_event(event: Any, subagent_config: SubagentConfig = None) -> str | None:
    """The parent-facing text for one ``async_delegation`` event, or None for any other type.

    ``subagent_config`` is the ``delegation`` config section (``model``, ``provider``,
    ``fallback_providers``), or a callable returning it: the model-rejection notice of an
    event that carries no dispatch-time stamp names it."""
    if not isinstance(event, dict):
        return None
    if event.get("type") == "async_delegation":
        return _format_async_delegation(event, subagent_config)
    return None


def _format_async_delegation(evt: dict[str, Any], config: SubagentConfig) -> str:
    if evt.get("task_failure_notice"):
        return interim_block(evt)
    if evt.get("is_batch") or isinstance(evt.get("results"), list):
        return batch_block(evt, _model_rejection_notice(evt, event_results(evt), config, batch=True))
    return single_block(evt, _model_rejection_notice(evt, [evt], config, batch=False))


# -- SUBAGENT MODEL REJECTED ----------------------------------------------------------------

def _mentions_rejection(model: str, entries: list[dict[str, Any]]) -> bool:
    for entry in entries:
        text = f"{entry.get('error') or ''} {entry.get('summary') or ''}".lower()
        # The configured model must be named: a rejection of some other model (a stale task
        # or a per-task override) is task-level noise, not a config problem.
        if model in text and says_model_not_found(text):
            return True
    return False


def _stamp(evt: dict[str, Any], source: SubagentConfig) -> Mapping[str, Any]:
    """The event's dispatch-time stamp; the config from ``source`` only for an unstamped event."""
    stamped = evt.get("subagent_config")
    if isinstance(stamped, dict):
        return stamped
    return subagent_stamp((source() if callable(source) else source) or {})


def _model_rejection_notice(evt: dict[str, Any], entries: list[dict[str, Any]], source: SubagentConfig, *,
                            batch: bool) -> list[str]:
    """One config-level notice when the provider rejected the configured delegation model."""
    try:
        config = _stamp(evt, source)
        model = inline(config.get("model"))
        if not model or not _mentions_rejection(model.lower(), entries):
            return []
        provider = inline(config.get("provider")) or "configured provider"
        scope = "Every task in this batch that reports it" if batch else "The task"
        lines = [
            f'⚠ SUBAGENT MODEL REJECTED: the configured Subagent Model "{model}" was rejected '
            f'by provider "{provider}" (not a valid model ID).',
            f"{scope} failed for this reason before doing any work; re-dispatching will fail "
            "the same way until the model is fixed.",
            "Check the configured subagent model: offload config get delegation.model",
        ]
        if not config.get("has_fallback"):
            lines.append("No fallback chain is configured, so no failover was attempted.")
        return lines
    except Exception:
        # The notice is advice; a surprise in building it must never cost the result itself.
        return []


# -- compact UI title ---------------------------------------------------------------------

_LABELS = {COMPLETED: "Completed", PARTIAL: "Partly Completed", "failed": "Failed", "error": "Failed",
           "interrupted": "Interrupted", "stalled": "Stalled", "unknown": "Unknown"}  # one per terminal unit state (offload.engine.states)


def _outcome_label(state: str, entries: list[dict[str, Any]]) -> str:
    if state == COMPLETED and any(is_truncated(e) for e in entries):
        return "Incomplete"  # every child says completed, but one was cut off
    return _LABELS.get(state, "Unknown")


def stop_note(evt: dict[str, Any]) -> str | None:
    """Why a unit stopped early, for people (``stop_reason``): "stalled: no progress for 10 s",
    "stopped by a user"; None when it did not stop early."""
    reason = stop_reason(evt)
    if reason == STOP_USER:
        return "stopped by a user"
    if reason != STOP_STALL:
        return None
    quiet = evt.get("stalled_after_quiet_seconds")
    return f"stalled: no progress for {quiet:.0f} s" if isinstance(quiet, (int, float)) else "stalled: no progress"


def async_delegation_display_text(evt: dict[str, Any]) -> str:
    """``Subagent Task Completed: <goal>`` or ``Subagent Tasks <Outcome>: <subject> (<n> tasks)``;
    the outcome is the unit's state (``event_state``), so a stopped fan-out never reads
    "Completed"."""
    results, goals = event_results(evt), event_goals(evt)
    if len(results) > 1:
        outcome = _outcome_label(event_state(evt), results)
        subject = inline(evt.get("group")) or "; ".join(
            g for g in (inline(goal_for(r, goals)) for r in results) if g
        )
        return f"Subagent Tasks {outcome}: {clip(subject, _DISPLAY_SUBJECT_CHARS)} ({len(results)} tasks)"
    entry = results[0] if results else evt
    state = child_state(entry.get("status")) if results else event_state(evt)
    goal = inline(goal_for(entry, goals, evt.get("goal"))) or "; ".join(inline(g) for g in goals)
    return f"Subagent Task {_outcome_label(state, [entry])}: {clip(goal, _DISPLAY_SUBJECT_CHARS)}"
