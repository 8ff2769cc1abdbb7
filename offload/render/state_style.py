"""One colour language for the state words (``offload.engine.states``), shared by every view:
the CLI's rich styles and the dashboard's badges read the same tone of each word.

Five tones, so a glance sorts work the same way on a terminal and in a browser:
``waiting`` (queued), ``active`` (running, finalizing; an owner alive), ``warn`` (stalling,
partial; a result awaiting delivery), ``ok`` (completed; delivered) and ``bad`` (failed, error,
interrupted, stalled, unknown; dropped; an owner that died). ``quiet`` is for what needs no
look (an owner that exited after its work). Invariant: green (``ok``) is only ever a unit or
child that completed, or a result that was delivered. Pure data, no I/O.
"""
from __future__ import annotations

from typing import Any

from offload.engine.states import unit_state

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


def tone(word: Any) -> str:
    """The tone of a unit or child state (any stored spelling), a delivery state or an owner fate."""
    text = str(word or "").strip().lower()
    if text in _OTHER_TONES:
        return _OTHER_TONES[text]
    return _STATE_TONES[unit_state(text)]


def rich_style(word: Any) -> str:
    return RICH_STYLES[tone(word)]
