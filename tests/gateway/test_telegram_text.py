"""Splitting at 4,096 and HTML escaping: what Telegram would accept, and nothing lost or forged."""
from __future__ import annotations

import html

import pytest
from hypothesis import given, settings, strategies as st

from offload.gateway.telegram.fake_api import parse_html
from offload.gateway.telegram.text import MAX_MESSAGE_CHARS, render_parts, telegram_length


def visible_lines(parts: list[str]) -> list[str]:
    lines: list[str] = []
    for part in parts:
        text, problem = parse_html(part)
        assert problem == "", part
        lines.extend(text.split("\n"))
    return lines


def test_ten_thousand_characters_split_on_line_boundaries_in_order():
    lines = [f"line {n:04d} " + "x" * 90 for n in range(100)]  # 100 lines of 100 chars = 10,099 chars
    parts = render_parts("\n".join(lines), header="Result")
    assert len(parts) == 3
    assert all(len(p) <= MAX_MESSAGE_CHARS for p in parts)
    assert parts[0].startswith("<b>Result</b>\n")
    assert visible_lines(parts) == ["Result", *lines]  # every line whole, in order: cut between lines only


def test_a_line_longer_than_the_limit_is_cut_but_never_inside_an_entity():
    body = "&" * 5000  # escapes to 25,000 characters of "&amp;"
    parts = render_parts(body)
    assert all(len(p) <= MAX_MESSAGE_CHARS for p in parts)
    assert all(parse_html(p)[1] == "" for p in parts)
    assert "".join(parse_html(p)[0] for p in parts) == body


def test_child_output_cannot_break_the_markup_or_forge_our_bold_header():
    hostile = "</b><b>Background result deleg_fake (completed)</b> <a href='x'>click</a> & <i>"
    [part] = render_parts(hostile, header="Background result deleg_1 (completed)")
    assert part.count("<b>") == 1 and part.startswith("<b>Background result deleg_1")
    text, problem = parse_html(part)
    assert problem == ""
    assert text.split("\n", 1)[1] == hostile  # shown literally


def test_header_is_escaped_too():
    [part] = render_parts("body", header="a <b> & c")
    assert part == "<b>a &lt;b&gt; &amp; c</b>\nbody"


def test_emoji_count_twice_like_telegram_counts_them():
    body = "😀" * 3000  # 6,000 UTF-16 units
    parts = render_parts(body)
    assert len(parts) == 2 and all(telegram_length(p) <= MAX_MESSAGE_CHARS for p in parts)
    assert "".join(parts) == body


def test_an_empty_body_is_still_a_sendable_message():
    assert render_parts("") == ["(empty)"]
    assert render_parts("  \n ", header="H") == ["<b>H</b>\n(empty)"]


def test_a_limit_too_small_for_an_entity_is_refused():
    with pytest.raises(ValueError, match="at least"):
        render_parts("x", limit=5)


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None, derandomize=True)
@given(body=st.text(alphabet=st.sampled_from("ab<>&;\"' \n😀é"), min_size=1, max_size=400),
       header=st.text(alphabet=st.sampled_from("Hx<&"), max_size=10), limit=st.integers(24, 60))
def test_every_split_is_well_formed_within_the_limit_and_loses_nothing(body, header, limit):
    parts = render_parts(body, header=header, limit=limit)
    assert all(telegram_length(p) <= limit for p in parts)
    texts = [parse_html(p) for p in parts]
    assert all(problem == "" for _, problem in texts)
    joined = "".join(text for text, _ in texts).replace("\n", "")
    shown_header = parse_html(parts[0])[0].split("\n")[0] if parts[0].startswith("<b>") else ""
    assert header.startswith(shown_header.rstrip("…"))
    expected = shown_header + (body if body.strip() else "(empty)")
    assert "".join(joined.split()) == "".join(expected.split())  # Telegram trims blank runs; nothing else lost
