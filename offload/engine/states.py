"""The words for the state of a delegation unit and of each of its children, and the one rule
from children to unit. Every surface takes its words from here: events and ledger rows, the
CLI views and ``--json``, the dashboard, the renderer's headline, the gateway and telemetry
(``docs/vocabulary.md`` is the user's page for them).

A child is ``queued`` while its unit waits to start, then ``running`` until it ends ``completed``, ``failed`` (it ran and did not succeed),
``error`` (it could not run: building or running it raised), ``interrupted`` (stopped),
``stalled`` (the stall monitor gave up on it) or ``unknown`` (its owner exited first).
A unit goes (``queued`` →) ``running`` → (``stalling`` →) ``finalizing`` → one terminal state
(``queued``: waiting in the ledger for a free slot, ``delegation.at_capacity: queue``, or for
an ``offload worker``, ``delegation.run_on: workers``; it holds no slot and never stalls):

- ``completed``   every child completed;
- ``partial``     some children completed, the others did not;
- ``failed``, ``error``, ``interrupted``, ``stalled``, ``unknown``: no child completed; the
  word the children share, else ``failed``. ``stalled`` and ``unknown`` are also set on the whole unit
  by the engine itself (the monitor force-finalized it; its owner died), whatever finished.

Invariants: a unit is ``completed`` only when every child that reported completed; words
written by older versions or foreign runners (``success``, ``timeout``, ``cancelled`` …) are read
through ``child_state``/``unit_state`` and never shown raw. Only ``running`` and ``stalling``
hold a slot and can be interrupted.
"""
from __future__ import annotations

from typing import Any, Iterable

QUEUED, RUNNING, STALLING, FINALIZING = "queued", "running", "stalling", "finalizing"
COMPLETED, PARTIAL, FAILED, ERROR = "completed", "partial", "failed", "error"
INTERRUPTED, STALLED, UNKNOWN = "interrupted", "stalled", "unknown"

CHILD_STATES = (QUEUED, RUNNING, COMPLETED, FAILED, ERROR, INTERRUPTED, STALLED, UNKNOWN)
TERMINAL_UNIT_STATES = (COMPLETED, PARTIAL, FAILED, ERROR, INTERRUPTED, STALLED, UNKNOWN)
UNIT_STATES = (QUEUED, RUNNING, STALLING, FINALIZING, *TERMINAL_UNIT_STATES)
ENGINE_ENDED = frozenset({STALLED, UNKNOWN})  # set on the whole unit, not derived from children
NOT_COMPLETED = frozenset(TERMINAL_UNIT_STATES) - {COMPLETED}  # a terminal unit the user should look at

# Why a unit (and its children that did not finish) stopped early: the event's ``stop_reason``
# (null otherwise). ``stall``: the stall monitor interrupted it (the unit may still be
# ``interrupted``, with the partial work its children returned, or ``stalled`` when it was
# force-finalized); ``user``: a person stopped it (Ctrl-C, ``offload stop``, the dashboard, the API).
STOP_STALL, STOP_USER = "stall", "user"
STOP_REASONS = (STOP_STALL, STOP_USER)

ACTIVE_STATES = (RUNNING, STALLING)  # holds a slot; can be interrupted or stall
LIVE_STATES = frozenset({*ACTIVE_STATES, FINALIZING})  # not yet reported (an engine's records)
UNFINISHED = frozenset({QUEUED, *LIVE_STATES})  # a ledger row with no result yet
DONE_STATES = frozenset({COMPLETED, "success"})  # raw words of a child that succeeded (older events)

# Words other writers used (hermes runners, earlier offload versions) and the state each means.
_ALIASES = {"success": COMPLETED, "failure": FAILED, "rejected": FAILED, "timeout": FAILED, "timed_out": FAILED,
            "cancelled": INTERRUPTED, "canceled": INTERRUPTED}
# Raw words of a child that failed or raised (not one stopped): the early-warning notice's trigger.
FAILED_STATES = frozenset({FAILED, ERROR, *(w for w, s in _ALIASES.items() if s == FAILED)})


def child_state(word: Any) -> str:
    """The child state a raw status word means; a missing or foreign word is ``unknown``, never
    success."""
    text = str(word or "").strip().lower()
    text = _ALIASES.get(text, text)
    return text if text in CHILD_STATES else UNKNOWN


def unit_state(word: Any) -> str:
    """The unit state a stored or received unit status means; a foreign word is ``unknown``."""
    text = str(word or "").strip().lower()
    if text in UNIT_STATES:
        return text
    return child_state(text)


def unit_state_of(children: Iterable[Any], *, error: Any = None) -> str:
    """The rule: the terminal state of a unit whose children ended with ``children`` (raw words).

    With no child result at all, the unit is ``error`` if it carries one (it could not run its
    children), else its outcome is ``unknown``. A child still ``queued`` or ``running`` in a
    finished unit counts as unknown."""
    states = [UNKNOWN if (s := child_state(word)) in (QUEUED, RUNNING) else s for word in children]
    if not states:
        return ERROR if error else UNKNOWN
    done = states.count(COMPLETED)
    if done == len(states):
        return COMPLETED
    if done:
        return PARTIAL
    return states[0] if len(set(states)) == 1 else FAILED


def result_state(result: dict[str, Any], *, is_batch: bool) -> str:
    """The terminal state of a unit from its runner's result dict (the engine's finalize)."""
    if not is_batch:
        return child_state(result.get("status") or COMPLETED)
    entries = [r for r in result.get("results") or [] if isinstance(r, dict)]
    return unit_state_of((r.get("status") for r in entries), error=result.get("error"))


def stop_reason(evt: dict[str, Any] | None) -> str | None:
    """Why a finished unit stopped early (``STOP_REASONS``), from its event; a ``stalled`` unit
    of an older version that did not write the field stopped for a stall."""
    evt = evt or {}
    said = evt.get("stop_reason")
    if said in STOP_REASONS:
        return str(said)
    return STOP_STALL if unit_state(evt.get("status")) == STALLED else None


def event_state(evt: dict[str, Any]) -> str:
    """The unit state of a completion event, also one stored by an older version: its children
    decide, unless the engine ended the unit itself (``stalled``, ``unknown``)."""
    said = unit_state(evt.get("status"))
    results = evt.get("results")
    if said in ENGINE_ENDED or said in LIVE_STATES or not isinstance(results, list):
        return said
    entries = [r for r in results if isinstance(r, dict)]
    if not entries:
        return said
    return unit_state_of(r.get("status") for r in entries)
