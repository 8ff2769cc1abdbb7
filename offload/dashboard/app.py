"""The dashboard's Starlette application: the pages (``/`` overview and roster, ``/d/ID`` a
delegation, ``/history``, ``/s/SESSION``), their server-sent events, actions, ``/metrics``
and the JSON API (``/api/delegations[/ID]``: result documents, ``offload.views.result``).

Pages are rendered on the server with Jinja2 (autoescape on: child output is untrusted and
is only ever printed as text) and are complete without JavaScript. A live part (the roster,
a delegation's facts, timeline and transcripts) opens one ``EventSource`` (``/events``,
``/d/ID/events``); the stream sends the part whenever it changes, never the version the page
already shows, so the page never reloads.
Ledger reads are blocking SQLite calls and run in the thread pool, never on the event loop.
"""
from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.datastructures import URL
from starlette.staticfiles import StaticFiles

from offload.access import tokens as token_store
from offload.dashboard import actions, approvals, history, metrics, model, overview, sessions, timeline, transcript
from offload.dashboard.security import Guard
from offload.access.http import HostCheck, HostGuard
from offload.ledger import LedgerError
from offload.telemetry import metrics as live_metrics
from offload.render.resumed import resume_note
from offload.render.state_style import TRUNCATED_MARK, TRUNCATED_WORD, child_mark, tone
from offload.render.text import format_age

if TYPE_CHECKING:
    from offload.runtime import Offload

_HERE = Path(__file__).parent
KEEPALIVE_S = 15.0
ENV_TOKEN = "OFFLOAD_DASHBOARD_TOKEN"
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_AGE_UNITS_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _templates() -> Environment:
    env = Environment(loader=FileSystemLoader(_HERE / "templates"), autoescape=select_autoescape(default=True))
    env.filters["age"] = lambda s: format_age(s) if isinstance(s, (int, float)) else "-"
    env.filters["secs"] = lambda s: f"{s:.1f} s" if isinstance(s, (int, float)) else "-"
    env.globals["tone"] = tone  # one colour language with the CLI (offload.render.state_style)
    env.globals["child_mark"] = child_mark  # a cut-off child's ⚠ TRUNCATED, as the CLI draws it
    env.globals["TRUNCATED"] = f"{TRUNCATED_MARK} {TRUNCATED_WORD}"
    env.filters["duration"] = _duration
    env.filters["resume_note"] = resume_note  # "↻ resumed from step 2 after pid … died (…)", as the CLI says it
    env.filters["clock"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"
    return env


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "-"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s" if seconds < 60 else format_age(seconds)


def parse_age(text: str) -> float | None:
    """``"90"``, ``"15m"``, ``"2h"``, ``"1d"`` → seconds; empty → None; else ValueError naming the fix."""
    if not text.strip():
        return None
    match = _AGE.match(text)
    if not match:
        raise ValueError(f"age {text!r} is not a duration: use a number with s, m, h or d, e.g. 15m or 2h")
    return float(match.group(1)) * _AGE_UNITS_S[match.group(2)]


def version(fragment: str) -> str:
    """A short name of a live part's content: the page and its stream compare them."""
    return hashlib.sha1(fragment.encode()).hexdigest()[:16]


def _path(url: str) -> str:
    """A link within the dashboard: its path and query, whatever Host the request named."""
    parts = url.split("/", 3)
    return "/" + parts[3] if len(parts) > 3 else "/"


class Dashboard:
    """Routes and their state: the template environment, the refresh interval, the stop flag."""

    def __init__(self, off: Offload, refresh_s: float = 1.0) -> None:
        self.runtime = off
        self.env = _templates()
        self.refresh_s = refresh_s
        self.stopping = threading.Event()  # set by the server at shutdown: open streams end
        self.registry = metrics.registry(off)
        live_metrics.install()

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=status_code)

    def roster_html(self) -> str:
        now = time.time()
        try:
            units, problem = model.roster(self.runtime, now), None
            glance = overview.overview(self.runtime, units, now)
        except LedgerError as exc:  # the page stays up and says what to fix; the stream retries
            units, problem, glance = [], str(exc), None
        return self.env.get_template("_roster.html").render(units=units, problem=problem, glance=glance)

    def approvals_html(self, delegation_id: str | None) -> str:
        """The pending approval requests (of one delegation when given), with their buttons."""
        try:
            requests = approvals.waiting(self.runtime, delegation_id)
        except LedgerError:  # the roster (or the page) says what is wrong with the ledger
            requests = []
        return self.env.get_template("_approvals.html").render(
            requests=requests, back=f"/d/{delegation_id}" if delegation_id else "/")

    async def approval_decision(self, request: Request) -> Response:
        """POST ``/approvals/ID/allow|deny``: answer one request, then back to the page it was on."""
        ok, message = await run_in_threadpool(approvals.decide, self.runtime, request.path_params["request_id"],
                                              request.path_params["decision"])
        target = URL(approvals.back_path(request.query_params.get("back", "/"))).include_query_params(
            msg=message, ok="1" if ok else "0")
        return RedirectResponse(str(target), status_code=303)

    async def ledger_problem(self, request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):  # a script reads the reason as JSON too
            return JSONResponse({"error": str(exc)}, 503)
        return self.render("problem.html", 503, problem=str(exc))

    def detail_html(self, delegation_id: str) -> tuple[dict[str, Any] | None, str]:
        """The delegation's live part (status, facts, timeline, transcripts); None if unknown."""
        now = time.time()
        unit = model.detail(self.runtime, delegation_id, now)
        if unit is None:
            return None, ""
        drawn = timeline.lanes(unit, unit["journal"], now)
        html = self.env.get_template("_detail.html").render(
            u=unit, timelines=[timeline.geometry(drawn, layout) for layout in (timeline.WIDE, timeline.NARROW)],
            transcripts=transcript.transcripts(unit, unit["journal"]))
        return unit, html

    async def roster_page(self, request: Request) -> Response:
        fragment = await run_in_threadpool(self.roster_html)
        asked = await run_in_threadpool(self.approvals_html, None)
        return self.render("roster.html", roster=fragment, version=version(fragment), refresh_s=self.refresh_s,
                           approvals=asked, approvals_version=version(asked),
                           message=request.query_params.get("msg"), ok=request.query_params.get("ok") == "1")

    async def roster_fragment(self, request: Request) -> Response:
        return HTMLResponse(await run_in_threadpool(self.roster_html))

    async def events(self, request: Request) -> Response:
        """The overview's live parts, the roster and the approval requests, on one stream."""
        return self._event_stream(request, {"roster": (self.roster_html, "v"),
                                            "approvals": (lambda: self.approvals_html(None), "a")})

    async def detail_events(self, request: Request) -> Response:
        """The delegation page's live part (sent again whenever it changes: while it runs, and
        as its delivery settles) and its approval requests, on one stream."""
        delegation_id = request.path_params["delegation_id"]
        return self._event_stream(request, {"detail": (lambda: self.detail_html(delegation_id)[1], "v"),
                                            "approvals": (lambda: self.approvals_html(delegation_id), "a")})

    def _event_stream(self, request: Request, parts: dict[str, tuple[Any, str]]) -> Response:
        return StreamingResponse(self._stream(request, parts), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def _stream(self, request: Request, parts: dict[str, tuple[Any, str]]) -> AsyncIterator[str]:
        """Send each part (event name -> its render function and the query parameter naming the
        version the page already shows, ``version``) whenever it changes, so a page is never
        swapped for an identical copy. One stream per page: a browser opens at most six
        connections to a host over HTTP/1.1, and a stream holds one as long as the page is open."""
        last = {event: request.query_params.get(param) for event, (_render, param) in parts.items()}
        quiet_s = 0.0
        while not self.stopping.is_set() and not await request.is_disconnected():
            for event, (render, _param) in parts.items():
                fragment = await run_in_threadpool(render)
                if version(fragment) != last[event]:
                    last[event], quiet_s = version(fragment), 0.0
                    yield f"event: {event}\n" + "".join(f"data: {line}\n" for line in fragment.splitlines()) + "\n"
            if quiet_s >= KEEPALIVE_S:
                quiet_s = 0.0
                yield ": keepalive\n\n"
            await asyncio.sleep(self.refresh_s)
            quiet_s += self.refresh_s

    async def history_page(self, request: Request) -> Response:
        """One page of every row, filtered, newest first, with the charts of the window."""
        q = request.query_params
        try:
            window_s = parse_age(q.get("age", ""))
            query = history.browse_query(q, None if window_s is None else time.time() - window_s)
        except ValueError as exc:
            return self.render("history.html", 400, units=[], error=str(exc), q=q, model=model)
        units, next_before, charts_html = await run_in_threadpool(self.history_parts, query, window_s)
        next_url = str(request.url.include_query_params(before=next_before)) if next_before else None
        first_url = str(request.url.remove_query_params("before"))
        return self.render("history.html", units=units, error=None, q=q, model=model, charts_html=charts_html,
                           next_url=next_url and _path(next_url), first_url=_path(first_url))

    def history_parts(self, query: Any, window_s: float | None) -> tuple[list[dict[str, Any]], str | None, str]:
        now = time.time()
        found = history.page(self.runtime, query)
        units = [model.history_unit(self.runtime.ledger(), row, now) for row in found.rows]
        window_s = window_s or history.DEFAULT_WINDOW_S
        chart = history.charts(self.runtime, window_s, now)
        charts_html = self.env.get_template("_charts.html").render(
            chart=chart, window_s=window_s, outcome=history.outcome_geometry(chart),
            latency=history.latency_geometry(chart))
        return units, found.next_before, charts_html

    async def session_page(self, request: Request) -> Response:
        """``/s/SESSION``: the session's delegations side by side, and where each result went."""
        session = request.path_params["session"]
        page = await run_in_threadpool(sessions.session_page, self.runtime, session, time.time())
        return self.render("session.html", 200 if page["units"] else 404, s=page, timelines=page["timelines"])

    async def api_list(self, request: Request) -> Response:
        """``/api/delegations``: the history's filters and keyset pages (``limit`` rows, newest
        first), each row as its result document; ``next`` is the next page's link (None on the last)."""
        q = request.query_params
        try:
            window_s = parse_age(q.get("age", ""))
            query = history.browse_query(q, None if window_s is None else time.time() - window_s,
                                         rows=history.api_rows(q.get("limit", "")))
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, 400)
        found = await run_in_threadpool(history.page, self.runtime, query)
        docs = await run_in_threadpool(model.documents, self.runtime, found.rows)
        next_url = found.next_before and _path(str(request.url.include_query_params(before=found.next_before)))
        return JSONResponse({"delegations": docs, "next": next_url})

    async def api_detail(self, request: Request) -> Response:
        """``/api/delegations/ID``: one delegation's result document."""
        delegation_id = request.path_params["delegation_id"]
        doc = await run_in_threadpool(model.document, self.runtime, delegation_id)
        if doc is None:
            return JSONResponse({"error": f"no delegation {delegation_id!r} in the ledger"}, 404)
        return JSONResponse(doc)

    async def detail_page(self, request: Request) -> Response:
        delegation_id = request.path_params["delegation_id"]
        unit, fragment = await run_in_threadpool(self.detail_html, delegation_id)
        if unit is None:
            return self.render("missing.html", 404, delegation_id=delegation_id)
        asked = await run_in_threadpool(self.approvals_html, delegation_id)
        return self.render("detail.html", u=unit, fragment=fragment, version=version(fragment),
                           approvals=asked, approvals_version=version(asked),
                           message=request.query_params.get("msg"),
                           ok=request.query_params.get("ok") == "1")

    async def action(self, request: Request) -> Response:
        delegation_id, name = request.path_params["delegation_id"], request.path_params["action"]
        act = actions.ACTIONS.get(name)
        if act is None:
            return self.render("missing.html", 404, delegation_id=delegation_id)
        ok, message = await run_in_threadpool(act, self.runtime, delegation_id)
        target = request.url_for("detail", delegation_id=delegation_id).include_query_params(
            msg=message, ok="1" if ok else "0")
        return RedirectResponse(target.path + "?" + target.query, status_code=303)

    async def metrics(self, request: Request) -> Response:
        body = await run_in_threadpool(metrics.exposition, self.registry)
        return Response(body, media_type=metrics.CONTENT_TYPE)


def create_app(off: Offload, *, token: str | Callable[[], str] | None = None, refresh_s: float = 1.0,
               hosts: HostCheck | None = None) -> Starlette:
    """The ASGI app over the runtime ``off`` (its ledger, and the units it runs itself).
    ``token``: the token every request must show (a value, or a function giving it now; default:
    ``$OFFLOAD_DASHBOARD_TOKEN``, else the operator token of ``off``'s home, made on first need;
    ``app.state.token()`` says which). ``app.state.dashboard.stopping`` ends open event streams
    at shutdown; ``hosts``: the Host names it answers to (default: those of a loopback bind)."""
    accepted = token_store.accepted(off.home, token, env_var=ENV_TOKEN)
    dash = Dashboard(off, refresh_s)
    routes = [
        Route("/", dash.roster_page, name="roster"),
        Route("/roster", dash.roster_fragment),
        Route("/events", dash.events),
        Route("/history", dash.history_page, name="history"),
        Route("/s/{session:path}", dash.session_page, name="session"),
        Route("/d/{delegation_id}", dash.detail_page, name="detail"),
        Route("/d/{delegation_id}/events", dash.detail_events),
        Route("/d/{delegation_id}/{action}", dash.action, methods=["POST"]),
        Route("/approvals/{request_id}/{decision}", dash.approval_decision, methods=["POST"]),
        Route("/metrics", dash.metrics),
        Route("/api/delegations", dash.api_list),
        Route("/api/delegations/{delegation_id}", dash.api_detail),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="static"),
    ]
    middleware = [Middleware(HostGuard, check=hosts or HostCheck("127.0.0.1")), Middleware(Guard, token=accepted)]
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={LedgerError: dash.ledger_problem})
    app.state.dashboard = dash
    app.state.token = accepted
    return app
