"""One colour language for the state words (``offload.engine.states``), shared by every view:
the CLI's rich styles and the dashboard's badges read the same tone of each word.

Five tones, so a glance sorts work the same way on a terminal and in a browser:
``waiting`` (queued), ``active`` (running, finalizing; an owner alive), ``warn`` (stalling,
partial; a result awaiting delivery), ``ok`` (completed; delivered) and ``bad`` (failed, error,
interrupted, stalled, unknown; dropped; an owner that died). ``quiet`` is for what needs no
look (an owner that exited after its work). Invariant: green (``ok``) is only ever a unit or
child that completed, or a result that was delivered; a completed child whose work was cut off
carries the ``⚠`` TRUNCATED mark beside it (``child_mark``) on every view. Pure data, no I/O.
"""
from __future__ import annotations

from typing import Any

from offload.engine.states import unit_state
from offload.render.truncation import is_truncated

TONES = ("waiting", "active", "warn", "ok", "bad", "quiet")
_STATE_TONES = {"queued": "waiting", "running": "active", "finalizing": "active", "stalling": "warn",
                "partial": "warn", "completed": "ok", "failed": "bad", "error": "bad", "interrupted": "bad",
                "stalled": "bad", "unknown": "bad"}
# Words that are not unit states but are shown beside them: delivery states and owner fates.
_OTHER_TONES = {"pending": "warn", "delivered": "ok", "dropped": "bad", "in memory": "waiting",
                "alive": "active", "exited": "quiet", "died": "bad"}
# The terminal's rendering of each tone (rich style names).
RICH_STYLES = {"waiting": "cyan", "active": "bold blue", "warn": "bold yellow", "ok": "bold green",
               "bad": "bold red", "quiet": "dim"}
# One mark per state, for views where a word would not fit (the CLI's child lines, the timeline).
MARKS = {"queued": "·", "running": "…", "finalizing": "…", "stalling": "!", "completed": "✓", "partial": "◐",
         "failed": "✗", "error": "✗", "interrupted": "■", "stalled": "■", "unknown": "?"}


TRUNCATED_MARK, TRUNCATED_WORD = "⚠", "TRUNCATED"


def child_mark(state: str, entry: Any = None) -> tuple[str, str]:
    """The mark and the words every view shows for a child in ``state`` whose result (entry or
    listed record) is ``entry``: one that stopped unfinished (``is_truncated``, the flag
    ``offload run`` reads) is ``⚠`` "completed, TRUNCATED", never a plain ✓; no new state."""
    if isinstance(entry, dict) and is_truncated(entry):
        return TRUNCATED_MARK, f"{state}, {TRUNCATED_WORD}"
    return MARKS[state], state


def child_tone(state: str, entry: Any = None) -> str:
    """The tone of a child: a truncated one (``child_mark``) is ``warn``, never green."""
    return "warn" if isinstance(entry, dict) and is_truncated(entry) else tone(state)


def tone(word: Any) -> str:
    """The tone of a unit or child state (any stored spelling), a delivery state or an owner fate."""
    text = str(word or "").strip().lower()
    if text in _OTHER_TONES:
        return _OTHER_TONES[text]
    return _STATE_TONES[unit_state(text)]


def rich_style(word: Any) -> str:
    return RICH_STYLES[tone(word)]
