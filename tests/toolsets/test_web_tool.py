"""fetch_url against httpx.MockTransport: schemes, redirects, caps, content types. No network."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

import offload.toolsets.web_tool as web_tool
from offload.toolsets.html_text import html_to_text
from offload.toolsets.toolspec import ToolContext, ToolError
from offload.toolsets.web_tool import TOOLS, fetch_url


class Site:
    """A MockTransport-backed client that records every request it serves."""

    def __init__(self, handler: Callable[[httpx.Request], httpx.Response]) -> None:
        self.requests: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return handler(request)

        self.client = httpx.Client(transport=httpx.MockTransport(record))

    def ctx(self, workspace: Path, **settings: object) -> ToolContext:
        return ToolContext(workspace=workspace, settings={"web_http_client": self.client, **settings})


def fetch(ctx: ToolContext, url: str) -> str:
    return fetch_url.handler({"url": url}, ctx)


def test_toolset_exports_fetch_url() -> None:
    assert [t.name for t in TOOLS] == ["fetch_url"] and fetch_url.toolset == "web"


def test_html_becomes_readable_text_with_links(workspace: Path) -> None:
    page = (
        "<html><head><title>Docs</title><script>alert('x')</script><style>p{}</style></head>"
        "<body><h2>Intro</h2><p>Read the <a href='/guide'>guide</a>.</p></body></html>"
    )
    site = Site(lambda r: httpx.Response(200, headers={"content-type": "text/html; charset=utf-8"}, text=page))
    result = fetch(site.ctx(workspace), "https://example.test/docs/")
    assert result == (
        "URL: https://example.test/docs/\nStatus: 200 OK\nContent-Type: text/html; charset=utf-8\n\n"
        "Title: Docs\n\n## Intro\nRead the guide [https://example.test/guide]."
    )


def test_json_is_returned_as_is_and_error_status_is_a_result(workspace: Path) -> None:
    site = Site(lambda r: httpx.Response(404, json={"error": "nope"}))
    result = fetch(site.ctx(workspace), "http://api.test/x")
    assert "Status: 404 Not Found" in result and result.endswith('{"error":"nope"}')


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.test/x", "javascript:alert(1)", "https:///nohost", "example.test"])
def test_non_http_urls_are_refused_without_a_request(workspace: Path, url: str) -> None:
    site = Site(lambda r: httpx.Response(200, text="should not be fetched"))
    with pytest.raises(ToolError, match="http"):
        fetch(site.ctx(workspace), url)
    assert site.requests == []


def _redirect_chain(length: int, final: str = "done") -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        hop = int(request.url.path.strip("/") or 0)
        if hop < length:
            return httpx.Response(302, headers={"location": f"/{hop + 1}"})
        return httpx.Response(200, text=final)

    return handler


def test_follows_up_to_five_redirects(workspace: Path) -> None:
    site = Site(_redirect_chain(5))
    result = fetch(site.ctx(workspace), "https://r.test/0")
    assert result.startswith("URL: https://r.test/5 (redirected from https://r.test/0)\nStatus: 200")
    assert len(site.requests) == 6


def test_six_redirects_are_too_many(workspace: Path) -> None:
    site = Site(_redirect_chain(6))
    with pytest.raises(ToolError, match="redirected more than 5 times"):
        fetch(site.ctx(workspace), "https://r.test/0")
    assert len(site.requests) == 6


def test_redirect_to_another_scheme_is_refused(workspace: Path) -> None:
    site = Site(lambda r: httpx.Response(301, headers={"location": "ftp://files.test/secret"}))
    with pytest.raises(ToolError, match="ftp"):
        fetch(site.ctx(workspace), "https://r.test/")
    assert len(site.requests) == 1


def test_huge_body_is_cut_while_streaming(workspace: Path) -> None:
    sent_chunks = []

    def endless() -> Iterator[bytes]:
        for n in range(10_000):  # 10 MB if read to the end
            sent_chunks.append(n)
            yield b"x" * 1_000

    site = Site(lambda r: httpx.Response(200, headers={"content-type": "text/plain"}, content=endless()))
    result = fetch(site.ctx(workspace, web_max_bytes=5_500), "https://big.test/")
    body, footer = result.split("\n\n", 1)[1].rsplit("\n", 1)
    assert body == "x" * 5_500
    assert footer == "[cut: only the first 5500 bytes of the body were read]"
    assert len(sent_chunks) <= 7


def test_binary_content_type_is_refused_before_reading(workspace: Path) -> None:
    read = []

    def body() -> Iterator[bytes]:
        read.append(True)
        yield b"\x89PNG\x00"

    site = Site(lambda r: httpx.Response(200, headers={"content-type": "image/png"}, content=body()))
    with pytest.raises(ToolError, match="image/png, not text"):
        fetch(site.ctx(workspace), "https://img.test/a.png")
    assert read == []


def test_untyped_binary_body_is_refused(workspace: Path) -> None:
    site = Site(lambda r: httpx.Response(200, content=b"\x00\x01\x02"))
    with pytest.raises(ToolError, match="binary"):
        fetch(site.ctx(workspace), "https://img.test/blob")


def test_each_request_carries_the_time_cap(workspace: Path) -> None:
    site = Site(_redirect_chain(1))
    fetch(site.ctx(workspace, web_timeout_s=7), "https://r.test/0")
    assert [r.extensions["timeout"]["read"] for r in site.requests] == [7, 7]


def test_slow_trickle_stops_at_the_deadline(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(web_tool, "_clock", lambda: now[0])

    def trickle() -> Iterator[bytes]:
        for _ in range(100):
            now[0] += 1.0  # each chunk "takes" a second
            yield b"slow "

    site = Site(lambda r: httpx.Response(200, headers={"content-type": "text/plain"}, content=trickle()))
    with pytest.raises(ToolError, match="still sending after the time cap"):
        fetch(site.ctx(workspace, web_timeout_s=5), "https://slow.test/")
    assert now[0] < 1010


def test_timeout_and_connection_errors_are_explained(workspace: Path) -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ToolError, match="did not answer within 3 s"):
        fetch(Site(timeout).ctx(workspace, web_timeout_s=3), "https://slow.test/")

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ToolError, match="could not fetch .*ConnectError"):
        fetch(Site(refused).ctx(workspace), "https://down.test/")


def test_interrupt_stops_the_download(workspace: Path) -> None:
    ctx_holder: list[ToolContext] = []

    def body() -> Iterator[bytes]:
        yield b"first "
        ctx_holder[0].interrupted.set()
        yield b"second "
        yield b"third"

    site = Site(lambda r: httpx.Response(200, headers={"content-type": "text/plain"}, content=body()))
    ctx = site.ctx(workspace)
    ctx_holder.append(ctx)
    with pytest.raises(ToolError, match="interrupted"):
        fetch(ctx, "https://x.test/")


@pytest.mark.timeout(20)
def test_an_interrupt_returns_within_a_second_while_the_server_sends_nothing(workspace: Path) -> None:
    """A server that accepts and never answers (a 30 s time cap): the tool's thread is back
    within a second of the interrupt, not at the cap."""
    import socket
    import threading
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    accepted = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        held.append(conn)  # read nothing, answer nothing
        accepted.set()

    threading.Thread(target=serve, daemon=True).start()
    ctx = ToolContext(workspace=workspace, settings={"web_allowed_hosts": ["127.0.0.1"], "web_timeout_s": 30})
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            fetch(ctx, f"http://127.0.0.1:{listener.getsockname()[1]}/")
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        assert accepted.wait(10)
        interrupted_at = time.monotonic()
        ctx.interrupted.set()
        caller.join(5)
        assert not caller.is_alive() and time.monotonic() - interrupted_at < 1.0
        assert isinstance(outcome[0], ToolError) and "interrupted; the request to" in str(outcome[0])
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_bad_injected_client_is_an_operator_error(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"web_http_client": "not a client"})
    with pytest.raises(ToolError, match="web_http_client"):
        fetch(ctx, "https://x.test/")


def test_charset_from_header_is_used(workspace: Path) -> None:
    site = Site(lambda r: httpx.Response(200, headers={"content-type": "text/plain; charset=latin-1"}, content="café".encode("latin-1")))
    assert fetch(site.ctx(workspace), "https://x.test/").endswith("\n\ncafé")


def test_html_to_text_drops_noise_and_keeps_structure() -> None:
    html = (
        "<body><noscript>enable js</noscript><ul><li>one</li><li>two <a href='https://x.org/'>x</a></li></ul>"
        "<p>a&nbsp;&amp;   b\n\n c</p><pre>  keep\n    this</pre><a href='#top'>top</a> "
        "<a href='javascript:void(0)'>js</a><table><tr><td>1</td><td>2</td></tr></table>"
    )
    assert html_to_text(html, "https://base.test/") == (
        "- one\n- two x [https://x.org/]\na\xa0& b c\n  keep\n    this\ntop js\n1 | 2"
    )


def test_html_to_text_survives_broken_markup() -> None:
    assert html_to_text("<p>unclosed <b>bold <script>x = '</p>'") == "unclosed bold"
