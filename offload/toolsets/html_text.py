"""HTML to readable plain text for ``fetch_url``, with the stdlib ``html.parser``.

Owns the conversion only (pure: no I/O). What the model gets:

* the page title on its own line, then the body text;
* script, style and other non-content elements dropped entirely;
* block elements (paragraphs, headings, list items, rows, ...) on their own lines, headings
  marked with ``#``, list items with ``-``; whitespace collapsed except inside ``<pre>``;
* every link's target kept as `` [URL]`` after its text, resolved against the page URL, so the
  model can follow it with another fetch.

Invariant: never raises on malformed markup (``html.parser`` is lenient and we only count
depths, never assume a tag is closed).
"""
from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

_DROPPED = frozenset({"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head"})
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure",
        "footer", "form", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tr", "ul",
        "h1", "h2", "h3", "h4", "h5", "h6",
    }
)
_HEADINGS = {f"h{level}": "#" * level for level in range(1, 7)}
_SPACES = re.compile(r"[ \t\r\n\f\v]+")
_BLANK_RUNS = re.compile(r"\n{3,}")


class _TextExtractor(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.title = ""
        self.parts: list[str] = []
        self._dropped_depth = 0
        self._pre_depth = 0
        self._in_title = False
        self._hrefs: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _DROPPED:
            self._dropped_depth += 1
        elif self._dropped_depth:
            return
        elif tag == "a":
            self._hrefs.append(dict(attrs).get("href"))
        elif tag in _BLOCKS:
            self._newline()
            if tag == "li":
                self.parts.append("- ")
            elif tag in _HEADINGS:
                self.parts.append(_HEADINGS[tag] + " ")
            elif tag == "pre":
                self._pre_depth += 1
        elif tag in ("td", "th") and not self._at_line_start():
            self.parts.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _DROPPED:
            self._dropped_depth = max(0, self._dropped_depth - 1)
        elif self._dropped_depth:
            return
        elif tag == "a" and self._hrefs:
            self._link_target(self._hrefs.pop())
        elif tag in _BLOCKS:
            if tag == "pre":
                self._pre_depth = max(0, self._pre_depth - 1)
            self._newline()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
            return
        if self._dropped_depth:
            return
        if self._pre_depth:
            self.parts.append(data)
            return
        text = _SPACES.sub(" ", data)
        if self._at_line_start():
            text = text.lstrip(" ")
        if text:
            self.parts.append(text)

    def _link_target(self, href: str | None) -> None:
        # Fragment-only and script links lead nowhere a fetch could follow.
        if not href or href.startswith("#") or href.lower().startswith(("javascript:", "mailto:")):
            return
        self.parts.append(f" [{urljoin(self.base_url, href.strip())}]")

    def _at_line_start(self) -> bool:
        # A list or heading marker counts as the line start: the text after it needs no space.
        return not self.parts or self.parts[-1].endswith(("\n", "- ", "# "))

    def _newline(self) -> None:
        if self.parts and not self.parts[-1].endswith("\n"):
            self.parts.append("\n")


def html_to_text(html: str, base_url: str = "") -> str:
    """Readable text of an HTML document; links as ``text [absolute URL]``."""
    extractor = _TextExtractor(base_url)
    extractor.feed(html)
    extractor.close()
    lines = [line.rstrip() for line in "".join(extractor.parts).split("\n")]
    body = _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip("\n")
    title = _SPACES.sub(" ", extractor.title).strip()
    return f"Title: {title}\n\n{body}" if title else body
