"""How deep in a chain of result-triggered background work the running turn is.

A delivered background result starts a new turn; if that turn delegates in the background, its
result starts another turn, and so on: a weak model can chain background work without end. So
each unit carries ``result_hops`` in its dispatch stamp (the event's ``subagent_config``): 0 when
a person's turn started it, h + 1 when a turn triggered by a result of h hops started it. The
consumer that runs a result's turn binds it (``triggered_by``), and ``delegate_task`` reads
``next_hops`` and refuses background work past ``delegation.max_result_chain``.

Invariant: a turn not triggered by a result (a person's message) always counts 0; the binding is
a ContextVar, so it reaches the turn's worker thread (``Conversation.run_turn`` copies the
context) and never leaks into the next turn.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterable, Iterator, Mapping

_NEXT_HOPS: ContextVar[int] = ContextVar("offload_result_hops", default=0)


def hops_of(event: Mapping[str, Any]) -> int:
    """The ``result_hops`` a delivered event's unit was dispatched with (0 for older events)."""
    stamp = event.get("subagent_config") if isinstance(event, Mapping) else None
    value = stamp.get("result_hops") if isinstance(stamp, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@contextmanager
def triggered_by(events: Iterable[Mapping[str, Any]]) -> Iterator[None]:
    """Run the body as the turn these delivered events started (one, or a gateway's batch)."""
    hops = [hops_of(event) for event in events]
    token = _NEXT_HOPS.set(max(hops) + 1 if hops else 0)
    try:
        yield
    finally:
        _NEXT_HOPS.reset(token)


def next_hops() -> int:
    """The ``result_hops`` background work started in the running turn gets."""
    return _NEXT_HOPS.get()
