"""``IndexedQueue``: the completion bus's ``queue.Queue``, indexed by owner, so a consumer takes
its own events without moving anyone else's.

It is a real ``queue.Queue`` (it overrides only the storage hooks ``_init/_qsize/_put/_get``,
as ``LifoQueue`` does): ``put``, ``get``, ``get_nowait``, ``empty`` and ``qsize`` behave as
before and stay FIFO, so code and tests that use ``completion_queue`` directly are unaffected.
Alongside the FIFO it keeps an index from owner key to the events under it; ``take`` removes
the accepted events under some keys, ``take_all`` those of a full scan, both under the queue's
own mutex, and neither ever requeues what it leaves. So N session consumers draining one bus
cost O(events) in total, not O(N x events) as a take-everything-and-put-back drain did.

Invariant: every stored event is in the FIFO and under exactly the keys ``owner_keys`` gave it
when it was put; both are changed together, under ``mutex``.
"""
from __future__ import annotations

import itertools
import queue
from collections import OrderedDict
from typing import Any, Callable, Iterable

Event = dict[str, Any]
PUBLIC = ("public",)  # events any consumer may take (no session to prove)


def needs_proof(evt: Event) -> bool:
    """Whether taking ``evt`` requires proving ownership (a delegation result, or a routed event)."""
    return evt.get("type") == "async_delegation" or bool(evt.get("session_key") or evt.get("origin_ui_session_id"))


def session_key_of(key: str) -> tuple[str, str]:
    return ("session_key", key)


def owner_keys(evt: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(evt, dict) or not needs_proof(evt):
        return (PUBLIC,)  # type: ignore[return-value]
    return (session_key_of(str(evt.get("session_key") or "")),)


class IndexedQueue(queue.Queue):
    # Storage hooks, called by queue.Queue with ``mutex`` held.
    def _init(self, maxsize: int) -> None:
        self._items: OrderedDict[int, Event] = OrderedDict()
        self._by_key: dict[tuple[str, str], dict[int, None]] = {}
        self._seq = itertools.count()

    def _qsize(self) -> int:
        return len(self._items)

    def _put(self, item: Event) -> None:
        seq = next(self._seq)
        self._items[seq] = item
        for key in owner_keys(item):
            self._by_key.setdefault(key, {})[seq] = None

    def _get(self) -> Event:
        seq, item = self._items.popitem(last=False)
        self._unindex(seq, item)
        return item

    def _unindex(self, seq: int, item: Event) -> None:
        for key in owner_keys(item):
            bucket = self._by_key.get(key)
            if bucket is not None:
                bucket.pop(seq, None)
                if not bucket:
                    del self._by_key[key]

    # Taking by owner. ``accept`` (a consumer's ownership predicate, which may do I/O) runs
    # outside the mutex, so a slow predicate never blocks the engine's ``put``; an event two
    # consumers both accept goes to whichever removes it first.
    def take(self, keys: Iterable[tuple[str, str]], accept: Callable[[Event], bool]) -> list[Event]:
        """Remove and return, in queue order, the events under ``keys`` that ``accept`` takes."""
        with self.mutex:
            seqs = sorted({seq for key in keys for seq in self._by_key.get(key, ())})
            candidates = [(seq, self._items[seq]) for seq in seqs]
        return self._remove([seq for seq, item in candidates if accept(item)])

    def take_all(self, accept: Callable[[Event], bool]) -> list[Event]:
        """Remove and return, in queue order, every event ``accept`` takes (a full scan)."""
        with self.mutex:
            candidates = list(self._items.items())
        return self._remove([seq for seq, item in candidates if accept(item)])

    def _remove(self, seqs: list[int]) -> list[Event]:
        if not seqs:
            return []
        taken = []
        with self.mutex:
            for seq in seqs:
                item = self._items.pop(seq, None)
                if item is not None:  # None: another consumer took it meanwhile
                    self._unindex(seq, item)
                    taken.append(item)
            if taken:
                self.not_full.notify(len(taken))
        return taken
