"""The public Python API of ``offload.Offload``: delegate, iterate a session's results as they
land (sync and async), acknowledge them, list, stop. ``Offload`` inherits these methods from
``PublicApi``; ``Handle`` and ``Result`` are the values they return, ``RequestError`` what bad
input raises::

    with Offload(home=home, model="gpt-4o-mini") as off:
        handle = off.delegate("Summarise README.md", session="s1")
        for result in off.results("s1", timeout_s=300):
            print(result.text)
            result.ack()

Invariants:
- a delegation goes through the same ``delegate_task`` tool as an agent's call (validation,
  placeholder-goal refusal, capacity, groups), with its routing captured for ``session``;
- results are delivered by the consumer path the chat, the gateway and ``run`` use
  (``SessionInbox``: claim in the ledger, hand over, complete the claim on ``ack``), so a result
  not acknowledged is delivered again (to the next ``Offload`` on the same ledger after a crash;
  at once after ``close``, which gives back what was handed over and not acknowledged), and one
  acknowledged is never delivered again;
- ``results`` never yields interim failure notices (the unit's own result still follows).
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator, Mapping, Sequence

from offload.agent.session_store import new_session_id
from offload.context.approval import reset_current_session_key, set_current_session_key
from offload.context.session_env import set_async_delivery
from offload.errors import RequestError
from offload.origin import Origin
from offload.session.inbox import Delivery, SessionInbox
from offload.views.result import DelegationResult, from_event, from_row

if TYPE_CHECKING:
    from offload.runtime import Offload

WAIT_SLICE_S = 0.25  # longest nap between polls: a sweep of other processes' rows needs a poll


@dataclass(frozen=True)
class Handle:
    """What ``delegate`` returns at once: the session the results go to and the delegation
    id of each completion unit (one per call; one per group / ungrouped task when
    ``delegation.independent_completions`` is on)."""

    session: str
    ids: tuple[str, ...]
    goals: tuple[str, ...]
    groups: tuple[str | None, ...]

    @property
    def id(self) -> str:
        """The first unit's id (the only one unless the call was split)."""
        return self.ids[0]


@dataclass(frozen=True)
class Result:
    """One finished delegation handed to you. ``state`` is a unit state of
    ``docs/vocabulary.md`` (completed, partial, failed, error, interrupted, stalled, unknown);
    ``text`` what a parent agent reads (the rendered notification); ``event`` the completion
    event as stored. Call ``ack()`` once you have used it; until then it is not delivered
    elsewhere, and it comes back if this process ends first."""

    id: str
    session: str
    state: str
    text: str
    event: Mapping[str, Any] = field(repr=False)
    group: str | None = None
    _doc: DelegationResult | None = field(default=None, repr=False, compare=False)
    _owner: Any = field(default=None, repr=False, compare=False)

    def ack(self) -> bool:
        """Acknowledge: this result is never delivered again. True the first time."""
        return self._owner.ack(self.id)

    def document(self) -> dict[str, Any]:
        """The result document (schema ``offload.result/1``, ``docs/vocabulary.md``), the same
        JSON that ``offload run --json``, the dashboard API and the MCP tools give."""
        return self._doc.to_json() if self._doc is not None else from_event(self.event).to_json()


class PublicApi:
    """The public methods of ``Offload`` (see the module docstring). Relies on the runtime's
    ``delegate_tool``, ``engine``, ``deliveries``, ``bus``, ``ledger()``, ``build_agent`` and
    ``session_store``."""

    def _api_state(self: Offload) -> _ApiState:
        state = self.__dict__.get("_api")
        if state is None:
            state = self.__dict__.setdefault("_api", _ApiState())
        return state

    # -- delegating -----------------------------------------------------------------------------
    def delegate(self: Offload, goal: str | None = None, *, tasks: Sequence[Mapping[str, Any]] | None = None,
                 session: str | None = None, context: str | None = None,
                 toolsets: Sequence[str] | None = None) -> Handle:
        """Start subagents in the background and return at once. ``goal``: one task; ``tasks``:
        several in parallel, each ``{"goal": ..., "group": ..., "context": ..., "toolsets": [...]}``
        (tasks of one group report together). ``session``: where the results go (default: a new
        session id, in the handle). Raises ``RequestError`` for bad input; nothing is started then."""
        _refuse_closed(self)
        if (goal is None) == (tasks is None):
            raise RequestError("delegate needs exactly one of goal='...' (one task) or tasks=[{'goal': ...}, ...]")
        session = _session_of(session)
        call: dict[str, Any] = {"context": context, "background": True}
        if tasks is not None:
            call["tasks"] = _tasks_of(tasks)
        else:
            call["goal"] = goal
        if toolsets is not None:
            call["toolsets"] = _toolsets_of(toolsets, "toolsets")
        cap = self.config.delegation.max_concurrent_children
        # At capacity the tool queues the call (delegation.at_capacity: queue, the default); with
        # refuse or inline it would refuse or run it in this thread: refused here instead.
        if self.config.delegation.at_capacity != "queue" and len(self.engine.slots) >= cap:
            raise RequestError(f"the background pool is full (delegation.max_concurrent_children={cap} "
                               "delegations running); take or stop some first, or raise that setting")
        reply = self._api_state().call_tool(self, session, call)
        return _handle_of(session, reply)

    # -- results --------------------------------------------------------------------------------
    def results(self: Offload, session: str, *, timeout_s: float | None = None) -> Iterator[Result]:
        """Yield each result of ``session`` as it lands (including ones recorded by an earlier
        process on this ledger and not acknowledged), until nothing of the session is running
        in this ``Offload`` and nothing is waiting. ``timeout_s``: give up after this long with
        ``TimeoutError`` naming what still runs. Acknowledge each with ``result.ack()``. Raises
        ``RequestError`` on a closed ``Offload`` (what it would take stays pending for the next)."""
        _refuse_closed(self)
        return self._results(_session_of(session), timeout_s)

    def _results(self: Offload, session: str, timeout_s: float | None) -> Iterator[Result]:
        inbox = self._api_state().inbox(self, session)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            _refuse_closed(self)
            requeued = self.deliveries.requeued  # a poll may recover a dead owner's unit, queued to resume here
            live = self._api_state().live_ids(self, inbox)  # BEFORE polling: a unit queues its event first
            ready = self._api_state().take(self, inbox)
            yield from ready
            if ready:
                continue
            if not live:
                if self.deliveries.requeued == requeued:
                    return
                continue  # look again: the unit it queued is waiting, starting or running now
            _wait_for_bus(self, deadline, inbox.session_id, live)

    async def aresults(self: Offload, session: str, *, timeout_s: float | None = None) -> AsyncIterator[Result]:
        """``results`` for asyncio: the waits run in a worker thread, never on the event loop."""
        iterator = self.results(session, timeout_s=timeout_s)
        done = object()
        while True:
            item = await asyncio.to_thread(next, iterator, done)
            if item is done:
                return
            yield item  # type: ignore[misc]

    def ack(self: Offload, delegation_id: str) -> bool:
        """Acknowledge a result handed over by ``results`` (or, by id, any pending one): it is
        never delivered again. True if this call settled it; False if it already was."""
        handed = self._api_state().pop_handed(delegation_id)
        if handed is not None:
            inbox, item = handed
            inbox.acknowledge(item)
            return True
        row = self.ledger().get(delegation_id) if self.ledger().exists() else None
        if row is None:
            raise RequestError(f"no delegation {delegation_id!r} in {self.ledger().location}; "
                               "use an id from a Handle or a Result (off.list() shows them)")
        return self.deliveries.mark_delivered(delegation_id)

    # -- listing and stopping ---------------------------------------------------------------------
    def list(self: Offload, session: str | None = None, *, settled: int = 200) -> list[dict[str, Any]]:
        """The ledger's delegations as result documents (``docs/vocabulary.md``): queued and
        running ones, those waiting for acknowledgement, then the ``settled`` most recently
        settled; optionally only those of ``session``."""
        ledger = self.ledger()
        if not ledger.exists():
            return []
        rows = [*ledger.queued_rows(), *ledger.running_rows(), *ledger.pending_rows(), *ledger.settled_rows(settled)]
        listed = [from_row(row, self.render).to_json() for row in rows]
        return [doc for doc in listed if session is None or doc["session"] == session]

    def stop(self: Offload, delegation_id: str) -> bool:
        """Ask a running delegation to stop, in this process or (through the ledger) the one that
        runs it; its partial result is still delivered. False if it had already finished."""
        if self.engine.interrupt_one(delegation_id, "stopped through the Python API"):
            return True
        row = self.ledger().get(delegation_id) if self.ledger().exists() else None
        if row is None:
            raise RequestError(f"no delegation {delegation_id!r} in {self.ledger().location}; "
                               "use an id from a Handle (off.list() shows them)")
        if row.state != "running":
            return False
        from offload.owner import control_requests

        control_requests.request(self.ledger(), delegation_id)
        return True

    def _give_back_handed(self) -> None:
        """On close: results handed over and not acknowledged go back to the ledger at once."""
        for inbox, item in self._api_state().drain_handed():
            inbox.give_back(item)


class _ApiState:
    """What the API keeps per ``Offload``: a parent agent per session (the delegate tool's
    caller), an inbox per session, and the results handed over and not yet acknowledged."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parents: dict[str, Any] = {}
        self.inboxes: dict[str, SessionInbox] = {}
        self.handed: dict[str, tuple[SessionInbox, Delivery]] = {}
        self.store: Any = None

    def call_tool(self, off: Offload, session: str, call: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            parent = self.parents.get(session)
            if parent is None:
                parent = self.parents[session] = off.build_agent(session)
        _refuse_missing_toolsets(call, list(getattr(parent, "enabled_toolsets", None) or []))
        token = set_current_session_key(session)
        async_token = set_async_delivery(True)  # a Python caller is always there to take results
        try:
            reply = json.loads(off.delegate_tool(**call, parent_agent=parent))
        finally:
            async_token.var.reset(async_token)
            reset_current_session_key(token)
        if reply.get("status") == "error":
            raise RequestError(str(reply.get("error")))
        return reply

    def inbox(self, off: Offload, session: str) -> SessionInbox:
        with self.lock:
            if self.store is None:
                self.store = off.session_store()
            inbox = self.inboxes.get(session)
            if inbox is None:
                inbox = self.inboxes[session] = SessionInbox(session, self.store, off)
            return inbox

    def take(self, off: Offload, inbox: SessionInbox) -> list[Result]:
        ready = []
        for item in inbox.poll():
            if not item.dedupe_id:  # an interim notice: the unit's own result still follows
                inbox.acknowledge(item)
                continue
            with self.lock:
                self.handed[item.delegation_id] = (inbox, item)
            ready.append(_result_of(off, inbox.session_id, item))
        return ready

    def live_ids(self, off: Offload, inbox: SessionInbox) -> list[str]:
        """The ids of the session's units this ``Offload`` runs or will start: on the engine's
        roster, in its admission queue, and (when neither holds one) waiting in the ledger's
        queue for it. The last look reads in the order a unit moves (the ledger's queue, the
        admission, the roster: it enters each before it leaves the one before), so none slips
        between two reads."""
        return self._here(off, inbox) or list(dict.fromkeys(self._queued_in_ledger(off, inbox) + self._here(off, inbox)))

    @staticmethod
    def _here(off: Offload, inbox: SessionInbox) -> list[str]:
        from offload.engine.states import LIVE_STATES

        queued = off.admission.items()  # first: a unit leaves it only once it is on the engine's roster
        live = [str(u.get("delegation_id")) for u in off.engine.list()
                if u.get("status") in LIVE_STATES and inbox.owns(u)]
        return live + [str(u["delegation_id"]) for u in queued if u["delegation_id"] not in live and inbox.owns(u)]

    @staticmethod
    def _queued_in_ledger(off: Offload, inbox: SessionInbox) -> list[str]:
        ledger = off.ledger()
        if not ledger.exists():
            return []
        return [row.delegation_id for row in ledger.queued_rows()
                if inbox.owns({"origin": Origin.of_row(row).to_json()}) and off.admission.may_start(ledger, row)]

    def pop_handed(self, delegation_id: str) -> tuple[SessionInbox, Delivery] | None:
        with self.lock:
            return self.handed.pop(delegation_id, None)

    def drain_handed(self) -> list[tuple[SessionInbox, Delivery]]:
        with self.lock:
            handed, self.handed = list(self.handed.values()), {}
            self.parents.clear()
            return handed


def _tasks_of(tasks: Any) -> list[dict[str, Any]]:
    if isinstance(tasks, (str, Mapping)) or not isinstance(tasks, Sequence):
        raise RequestError(f"tasks must be a list of dicts, got {type(tasks).__name__}: tasks=[{{'goal': ...}}, ...]")
    out = []
    for i, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            raise RequestError(f"tasks[{i}] is {task!r}, a {type(task).__name__}; each task is a dict: "
                               f"tasks=[{{'goal': {str(task)[:60]!r}}}]")
        out.append(dict(task))
        if out[-1].get("toolsets") is not None:
            out[-1]["toolsets"] = _toolsets_of(out[-1]["toolsets"], f"tasks[{i}]['toolsets']")
    return out


def _toolsets_of(value: Any, where: str) -> list[str]:
    """A list of toolset names; a lone string (``"terminal"``) is refused, not read letter by letter."""
    if isinstance(value, str):
        raise RequestError(f"{where} is the string {value!r}: give a list of names, [{value!r}]")
    if not isinstance(value, Sequence) or not all(isinstance(name, str) for name in value):
        raise RequestError(f"{where} must be a list of toolset names (strings), got {value!r}")
    return list(value)


def _refuse_missing_toolsets(call: Mapping[str, Any], enabled: list[str]) -> None:
    """A known toolset the caller asks for that this ``Offload``'s agents lack would be dropped
    from the child silently (a child never gets a toolset its parent lacks): refused instead."""
    from offload.toolsets.toolset_names import KNOWN_TOOLSETS

    asked = list(call.get("toolsets") or []) + [n for t in call.get("tasks") or [] for n in t.get("toolsets") or []]
    missing = sorted({name for name in asked if name in KNOWN_TOOLSETS and name not in enabled})
    if missing:
        raise RequestError(f"toolset(s) {missing} are not enabled for this Offload's agents (enabled: {enabled}); "
                           "add them to `toolsets` in config.yaml, or pass Offload(toolsets=[...])")


def _refuse_closed(off: Offload) -> None:
    if off.closed:
        raise RequestError("this Offload is closed; open a new one (with Offload(...) as off:)")


def _session_of(session: str | None) -> str:
    if session is None:
        return new_session_id()
    if not isinstance(session, str) or not session.strip():
        raise RequestError(f"session must be a non-empty string (got {session!r}); omit it for a new session id")
    return session.strip()


def _handle_of(session: str, reply: dict[str, Any]) -> Handle:
    goals = tuple(str(g) for g in reply.get("goals") or [])
    units = reply.get("units") or [{"delegation_id": reply.get("delegation_id"), "group": None}]
    if reply.get("mode") != "background" or not units[0].get("delegation_id"):  # lost a race for the last slot
        raise RequestError(f"the background pool filled up meanwhile, so the call ran in this thread and is not "
                           f"delivered through results(): {json.dumps(reply.get('results'), default=str)[:2000]}; "
                           "raise delegation.max_concurrent_children or take results first")
    return Handle(session=session, ids=tuple(str(u["delegation_id"]) for u in units), goals=goals,
                  groups=tuple(u.get("group") for u in units))


def _result_of(off: Offload, session: str, item: Delivery) -> Result:
    doc = from_event(item.event, lambda evt: item.text)  # the text this consumer rendered and hands over
    return Result(id=item.delegation_id, session=session, state=doc.state, text=item.text, event=item.event,
                  group=doc.group, _doc=doc, _owner=off)


def _wait_for_bus(off: Offload, deadline: float | None, session: str, live: list[str]) -> None:
    """Sleep until something is put on the bus (or a slice passes); TimeoutError past ``deadline``."""
    remaining = WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError(f"results of session {session!r} did not all land in time; still running: "
                           f"{', '.join(live) or 'nothing (results are being delivered elsewhere)'}. "
                           "Wait longer (timeout_s=...), or off.stop(ID) them")
    queue = off.bus.completion_queue
    with queue.not_empty:
        queue.not_empty.wait(min(remaining, WAIT_SLICE_S))
