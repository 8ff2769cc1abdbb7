"""What the dashboard shows a person (issue 26, item 13): a unit's label cuts its goals at a word,
marked "…" (the engine's own label cuts each goal at 40 characters, mid-word), and the pages
still fit a screen narrower than 600 px: nothing scrolls sideways, no text runs off."""
from __future__ import annotations

import html as html_text
import json
import re

import pytest

from offload.testing.demo_script import DEMO_TASKS
from tests.dashboard.test_owner_fate import dashboard_url  # noqa: F401 (fixture: `offload dashboard` served)
from tests.e2e.conftest import offload

pytestmark = pytest.mark.timeout(120)


def _one_unit_of_three() -> str:
    done = offload("run", "--demo-model", "compare the formats")
    assert done.returncode == 0, done
    return json.loads(offload("inbox", "--all", "--json").stdout)["settled"][0]["id"]


def _label(html: str, delegation_id: str) -> str:
    row = re.search(rf'<a [^>]*href="/d/{delegation_id}">.*?<td class="label">(.*?)</td>', html, re.S)
    assert row, html
    return html_text.unescape(row.group(1))


def test_a_units_label_cuts_each_goal_at_a_word_with_an_ellipsis(dashboard_url):  # noqa: F811
    unit = _one_unit_of_three()
    label = _label(dashboard_url.get("/history").text, unit)
    assert label.startswith("3 subagents: "), label
    goals = [task["goal"] for task in DEMO_TASKS]
    for shown, goal in zip(label.removeprefix("3 subagents: ").split("; "), goals):
        if shown == goal:
            continue
        assert shown.endswith("…"), shown
        kept = shown.removesuffix("…")
        assert goal.startswith(kept) and goal[len(kept)] in " ,.;:", (shown, goal)  # cut at a word, never in one


@pytest.mark.parametrize("width", [360, 480, 599])
def test_every_page_fits_a_narrow_screen(dashboard_url, browser, width):  # noqa: F811
    unit = _one_unit_of_three()
    browser.set_window_size(width, 800)
    for path in ("/", "/history", f"/d/{unit}"):
        browser.get(dashboard_url.url + path)
        overflow = browser.execute_script(
            "const d = document.documentElement;"
            "const wide = [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > d.clientWidth + 1);"
            "return [d.scrollWidth - d.clientWidth, wide.slice(0, 3).map(e => e.tagName + '.' + e.className)];")
        assert overflow[0] <= 0 and not overflow[1], (width, path, overflow)
