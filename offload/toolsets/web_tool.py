"""The ``web`` toolset: fetch one http(s) URL and return it as text.

Owns the fetch: URL checks, redirects, size and time caps, content-type policy, decoding; HTML
is turned into readable text by ``offload/toolsets/html_text.py``.

Invariants:

* Only ``http``/``https`` URLs are requested, at every redirect hop too; redirects are followed
  here (not by the client) so the 5-hop limit and the scheme check hold for any client.
* At most ``web_max_bytes`` of body are read, by streaming, so a huge body is cut, never
  buffered whole. Each request carries ``web_timeout_s`` and the whole read stops at that
  deadline; an interrupt returns the tool within a second even while a connect or a read
  blocks (the request runs on a helper thread, abandoned and its client closed).
* Non-text content is refused before its body is read.
* The client fetch_url creates connects only to public addresses, or to hosts and networks in
  ``settings["web_allowed_hosts"]`` (config ``web.allowed_hosts``), checked on the resolved
  address of every hop where the socket opens (``offload/toolsets/net_guard.py``);
  ``settings["web_resolve"]`` replaces the system resolver (tests).
* The HTTP client can be injected as ``settings["web_http_client"]`` (an ``httpx.Client``), so
  tests run on ``httpx.MockTransport`` and never touch the network. An injected client is the
  caller's: it is not closed here, and its transport, not net_guard, decides what it reaches.
"""
from __future__ import annotations

import codecs
import contextvars
import threading
import time
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

from offload.toolsets.html_text import html_to_text
from offload.toolsets.net_guard import ALLOW_KEY, AddressPolicy, GuardedTransport
from offload.toolsets.tool_args import reject_unknown, require_str, setting_int, setting_number
from offload.toolsets.toolspec import Tool, ToolContext, ToolError

DEFAULT_MAX_BYTES = 2_000_000
DEFAULT_TIMEOUT_S = 30.0
MAX_REDIRECTS = 5
_TOOL = "fetch_url"
_USER_AGENT = "offload-fetch_url/0.1 (+background agent tool)"
_TEXT_TYPES = frozenset(
    {
        "application/json", "application/xml", "application/xhtml+xml", "application/javascript",
        "application/x-javascript", "application/ecmascript", "application/yaml", "application/x-yaml",
        "application/toml", "application/x-ndjson", "application/sql", "application/graphql",
    }
)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_INTERRUPT_POLL_S = 0.1  # how soon an interrupt returns a fetch that waits on the network
_clock = time.monotonic  # module-level so tests can drive the deadline without sleeping


def _check_url(url: str, what: str = "URL") -> str:
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https"):
        raise ToolError(f"{_TOOL}: the {what} '{url}' is not http or https; only web pages can be fetched.")
    if not parts.hostname:
        raise ToolError(f"{_TOOL}: the {what} '{url}' has no host name; give a full URL like https://example.com/page.")
    return url.strip()


def _is_text(mime: str) -> bool:
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def _client_from(settings: dict[str, Any], timeout_s: float) -> tuple[httpx.Client, bool]:
    """The client to use and whether we own (and must close) it."""
    injected = settings.get("web_http_client")
    if injected is None:
        transport = GuardedTransport(_policy_from(settings), settings.get("web_resolve"))
        # trust_env=False: a proxy from the environment would connect for us, unchecked.
        return httpx.Client(transport=transport, timeout=timeout_s, headers={"User-Agent": _USER_AGENT},
                            trust_env=False), True
    if not isinstance(injected, httpx.Client):
        raise ToolError(
            f"The setting 'web_http_client' is a {type(injected).__name__}, not an httpx.Client; "
            "the operator must fix it or remove it."
        )
    return injected, False


def _policy_from(settings: dict[str, Any]) -> AddressPolicy:
    entries = settings.get("web_allowed_hosts") or []
    try:
        if isinstance(entries, str):
            raise ValueError("it must be a list")
        return AddressPolicy.from_entries(entries)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"The setting 'web_allowed_hosts' ({ALLOW_KEY}) is invalid: {exc}; "
                        "the operator must fix it.") from exc


def _open(client: httpx.Client, url: str, timeout_s: float) -> httpx.Response:
    """Send GET and follow up to MAX_REDIRECTS redirects; returns an open streaming response."""
    request = client.build_request("GET", url, timeout=timeout_s)
    for _ in range(MAX_REDIRECTS + 1):
        response = client.send(request, stream=True, follow_redirects=False)
        next_request = response.next_request if response.is_redirect else None
        if next_request is None:
            return response
        response.close()
        _check_url(str(next_request.url), what="redirect target")
        request = next_request
    raise ToolError(f"{_TOOL}: '{url}' redirected more than {MAX_REDIRECTS} times; give the final URL instead.")


def _read_body(response: httpx.Response, max_bytes: int, deadline: float, interrupted: Any) -> tuple[bytes, bool]:
    """Up to ``max_bytes`` of the (decoded) body; returns (body, whether it was cut)."""
    chunks: list[bytes] = []
    size_bytes = 0
    for chunk in response.iter_bytes():
        if interrupted.is_set():
            raise ToolError(f"{_TOOL}: the agent was interrupted; the download of {response.url} stopped.")
        if _clock() > deadline:
            raise ToolError(
                f"{_TOOL}: {response.url} was still sending after the time cap; try again later or a smaller page."
            )
        room = max_bytes - size_bytes
        if len(chunk) > room:
            chunks.append(chunk[:room])
            return b"".join(chunks), True
        chunks.append(chunk)
        size_bytes += len(chunk)
    return b"".join(chunks), False


def _refuse_non_text(mime: str, url: str) -> None:
    if mime and not _is_text(mime):
        raise ToolError(
            f"{_TOOL}: {url} is {mime}, not text, so it was not downloaded. fetch_url reads HTML, text "
            "and JSON/XML only; use a tool made for that format if you have one."
        )


def _decode(body: bytes, response: httpx.Response) -> str:
    encoding = response.charset_encoding or "utf-8"
    try:
        codecs.lookup(encoding)
    except LookupError:
        encoding = "utf-8"  # a bogus charset label should not hide the page
    return body.decode(encoding, errors="replace")


def _render(response: httpx.Response, url: str, body: bytes, cut: bool, max_bytes: int) -> str:
    content_type = response.headers.get("content-type", "")
    mime = content_type.split(";", 1)[0].strip().lower()
    if not mime and b"\x00" in body[:8192]:
        raise ToolError(f"{_TOOL}: {url} sent no content type and its body is binary, so it is not shown.")
    text = _decode(body, response)
    if mime in _HTML_TYPES or (not mime and text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))):
        text = html_to_text(text, base_url=str(response.url))
    final_url = str(response.url)
    lines = [f"URL: {final_url}" + (f" (redirected from {url})" if final_url != url else "")]
    lines.append(f"Status: {response.status_code} {response.reason_phrase}".rstrip())
    lines.append(f"Content-Type: {content_type or '(none)'}")
    footer = f"\n[cut: only the first {max_bytes} bytes of the body were read]" if cut else ""
    return "\n".join(lines) + "\n\n" + text + footer


def fetch_url_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    reject_unknown(args, ("url",), _TOOL)
    url = _check_url(require_str(args, "url", _TOOL))
    max_bytes = setting_int(ctx.settings, "web_max_bytes", DEFAULT_MAX_BYTES, minimum=1_000, maximum=100_000_000)
    timeout_s = setting_number(ctx.settings, "web_timeout_s", DEFAULT_TIMEOUT_S, minimum=0.1, maximum=600)
    if ctx.interrupted.is_set():
        raise ToolError(f"{_TOOL}: the agent was interrupted before the request; nothing was fetched.")
    client, owned = _client_from(ctx.settings, timeout_s)
    try:
        return _interruptible(lambda: _fetch(client, url, max_bytes, timeout_s, ctx.interrupted), ctx.interrupted,
                              f"{_TOOL}: the agent was interrupted; the request to {url} was abandoned.",
                              client.close if owned else None)
    finally:
        if owned:
            client.close()


def _interruptible(work: Callable[[], str], interrupted: threading.Event, why: str,
                   abandon: Callable[[], Any] | None) -> str:
    """``work()`` on a helper thread, returned (or raised) here, or a ToolError ``why`` within
    ``_INTERRUPT_POLL_S`` of an interrupt: a connect or a read that blocks (a server that sends
    nothing) holds only the helper, which ``abandon`` (closing our own client) releases."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["text"] = work()
        except BaseException as exc:  # handed to the caller's thread as it is
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=contextvars.copy_context().run, args=(run,), name="fetch_url", daemon=True).start()
    while not done.wait(_INTERRUPT_POLL_S):
        if interrupted.is_set():
            if abandon is not None:
                abandon()
            raise ToolError(why)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["text"]


def _fetch(client: httpx.Client, url: str, max_bytes: int, timeout_s: float, interrupted: threading.Event) -> str:
    deadline = _clock() + timeout_s
    try:
        response = _open(client, url, timeout_s)
        try:
            mime = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            _refuse_non_text(mime, str(response.url))
            body, cut = _read_body(response, max_bytes, deadline, interrupted)
        finally:
            response.close()  # also stops a body we cut short
        return _render(response, url, body, cut, max_bytes)
    except httpx.TimeoutException as exc:
        raise ToolError(f"{_TOOL}: {url} did not answer within {timeout_s:g} s; try again later or another source.") from exc
    except httpx.HTTPError as exc:
        raise ToolError(
            f"{_TOOL}: could not fetch {url}: {type(exc).__name__}: {exc}. Check the URL, or try another source."
        ) from exc


fetch_url = Tool(
    name="fetch_url",
    toolset="web",
    description=(
        "Fetch an http(s) URL and return its status, content type and text. HTML is converted to "
        "readable text with links shown as [URL]; JSON/XML/plain text are returned as they are. "
        "Binary content is refused; large bodies are cut."
    ),
    parameters={
        "type": "object",
        "properties": {"url": {"type": "string", "description": "Full http:// or https:// URL."}},
        "required": ["url"],
        "additionalProperties": False,
    },
    handler=fetch_url_handler,
    read_only=True,
)

TOOLS = [fetch_url]
