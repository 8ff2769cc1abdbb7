"""``clip_words``: one line, at most the limit, cut at a word and marked with "…"."""
from __future__ import annotations

from hypothesis import given, strategies as st

from offload.render.text import clip_words


def test_cuts_at_the_last_word_that_fits_and_marks_it():
    assert clip_words("List the strengths of YAML for configuration files.", 30) == "List the strengths of YAML…"
    assert clip_words("short goal", 30) == "short goal"
    assert clip_words("a\nmulti   line\tgoal", 30) == "a multi line goal"
    assert clip_words("x" * 50, 10) == "x" * 9 + "…"  # one overlong word: cut inside it, still marked


@given(st.text(), st.integers(min_value=2, max_value=80))
def test_never_longer_than_the_limit_and_always_a_prefix(text, limit):
    clipped = clip_words(text, limit)
    flat = " ".join(text.split())
    assert len(clipped) <= limit and "\n" not in clipped
    assert clipped == flat or (clipped.endswith("…") and flat.startswith(clipped[:-1]))
