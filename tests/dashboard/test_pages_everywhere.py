"""Every page (overview, history, delegation, session) in headless Chromium: it fits a phone's
390 px without sideways scrolling, follows the system's dark theme, works from the keyboard
(a skip link, a visible focus ring, expanders opened with Enter) and fetches nothing from
outside the dashboard (every asset ships in the package)."""
from __future__ import annotations

import json
import re

import pytest
from selenium.webdriver.common.keys import Keys

from tests.dashboard.test_delegation_page import _demo_unit, cli_dashboard  # noqa: F401 (fixture)
from tests.e2e.conftest import offload

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


def _pages(url: str, home) -> list[str]:
    unit = _demo_unit(home)
    session = json.loads(offload("inbox", "--all", "--json", HERMES_HOME=str(home)).stdout)["settled"][0]["session"]
    return [f"{url}/", f"{url}/history", f"{url}/d/{unit}", f"{url}/s/{session}"]


def _luminance(css_colour: str) -> float:
    r, g, b = [int(v) for v in re.findall(r"\d+", css_colour)[:3]]
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_every_page_fits_390_px_is_dark_in_the_dark_and_fetches_only_its_own_assets(browser, cli_dashboard):  # noqa: F811
    url, home = cli_dashboard[0].url, cli_dashboard[1]
    pages = _pages(url, home)
    browser.set_window_size(390, 844)
    for page in pages:
        browser.get(page)
        overflow = browser.execute_script(
            "const d = document.documentElement; return [d.scrollWidth - d.clientWidth, [...document.querySelectorAll("
            "'main *')].filter(e => e.getBoundingClientRect().right > d.clientWidth + 1).slice(0, 3).map(e => e.tagName)];")
        assert overflow[0] <= 0 and not overflow[1], (page, overflow)
        fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
        assert fetched and all(name.startswith(url + "/") for name in fetched), (page, fetched)
        assert browser.execute_script("return getComputedStyle(document.body).backgroundColor;") == "rgb(255, 255, 255)"
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    for page in pages:
        browser.get(page)
        body = browser.execute_script("const s = getComputedStyle(document.body); return [s.backgroundColor, s.color];")
        assert _luminance(body[0]) < 0.15 and _luminance(body[1]) > 0.7, (page, body)
        badge = browser.execute_script("return getComputedStyle(document.querySelector('.badge.tone-ok')).color;")
        assert _luminance(badge) > 0.45, (page, badge)  # the tones lighten on a dark page, still green
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def test_the_pages_work_from_the_keyboard(browser, cli_dashboard):  # noqa: F811
    url, home = cli_dashboard[0].url, cli_dashboard[1]
    detail = _pages(url, home)[2]
    browser.get(detail)
    body = browser.find_element("tag name", "body")
    body.send_keys(Keys.TAB)
    skip = browser.switch_to.active_element
    assert skip.text == "skip to content"
    outline = browser.execute_script("return getComputedStyle(document.activeElement).outlineStyle;")
    assert outline != "none"  # the focus is visible
    skip.send_keys(Keys.ENTER)
    assert browser.execute_script("return document.activeElement.id;") == "main"
    for _ in range(60):  # Tab on until an expander of the transcript has the focus
        browser.switch_to.active_element.send_keys(Keys.TAB)
        if browser.execute_script("return document.activeElement.tagName;") == "SUMMARY":
            break
    else:
        pytest.fail("no expander of the transcript is reachable with Tab")
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    assert browser.execute_script("return document.activeElement.parentElement.open;") is True
    browser.get(detail.rsplit("/d/", 1)[0] + "/history")
    browser.find_element("tag name", "body").send_keys("/")
    assert browser.execute_script("return document.activeElement.name;") == "q"  # "/" goes to the goal search
