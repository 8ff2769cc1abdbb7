"""One colour language for the state words: every word has a tone, green only for success,
and the CLI's views colour a state word in the style of its tone (the dashboard's badges use
the same tone as a CSS class, checked in tests/dashboard)."""
from __future__ import annotations

from rich.text import Text

from offload.cli import views
from offload.engine.states import CHILD_STATES, UNIT_STATES
from offload.ledger import LedgerRow
from offload.render.state_style import MARKS, RICH_STYLES, TONES, rich_style, tone


def test_every_state_word_has_a_tone_a_style_and_a_mark():
    for word in (*UNIT_STATES, *CHILD_STATES):
        assert tone(word) in TONES and rich_style(word) == RICH_STYLES[tone(word)] and MARKS[word]


def test_green_means_completed_or_delivered_only():
    assert [w for w in UNIT_STATES if tone(w) == "ok"] == ["completed"]
    assert tone("delivered") == "ok" and tone("success") == "ok"  # an older writer's word for completed
    assert {tone(w) for w in ("failed", "error", "stalled", "unknown", "interrupted", "dropped", "died")} == {"bad"}


def test_a_foreign_word_reads_as_unknown_never_as_success():
    assert tone("banana") == tone("unknown") == "bad"


def _styles_of(renderable, word: str) -> set[str]:
    found = set()
    for line in renderable.renderables:
        assert isinstance(line, Text)
        for span in line.spans:
            if line.plain[span.start:span.end] == word:
                found.add(str(span.style))
    return found


def test_cli_views_colour_the_state_word_in_its_tone():
    row = LedgerRow(delegation_id="deleg_x", origin_session="s", state="failed", dispatched_at=1.0,
                    completed_at=2.0, task={"goal": "g"}, event={"status": "failed", "summary": None})
    assert _styles_of(views.ledger_finished([row], "awaiting delivery", now=3.0), "failed") == {"bold red"}
    live = [{"delegation_id": "deleg_y", "status": "stalling", "goal": "g"}]
    assert _styles_of(views.live_roster(live), "stalling") == {"bold yellow"}
