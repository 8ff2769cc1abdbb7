"""Counters and histograms of what happens to delegation units in this process: how long
dispatch and completion take, interrupts, recoveries, delivery steps, ledger errors.
(What every process did to units -- dispatched, finished, delivered -- is read from the ledger
at each scrape: ``offload.dashboard.metrics``, stalls included.)

Fed by the engine's observer seam once ``install()`` ran (the dashboard does). The metric
objects are registered in no global registry: ``COLLECTOR`` is added to each dashboard's
own registry, so two dashboards in one process (tests) never clash.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.registry import Collector

from offload.engine.observers import add_observer

_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_DURATION_BUCKETS_S = (0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

DISPATCH_LATENCY = Histogram("offload_dispatch_latency_seconds", "Time a dispatch call takes (record, ledger row, "
                             "scheduling)", buckets=_LATENCY_BUCKETS_S, registry=None)
COMPLETION_LATENCY = Histogram("offload_completion_latency_seconds", "Time from dispatch to the unit's result",
                               buckets=_DURATION_BUCKETS_S, registry=None)
INTERRUPTS = Counter("offload_interrupts", "Interrupts signalled to running units, by reason", ["reason"], registry=None)
RECOVERIES = Counter("offload_recoveries", "Units of dead owner processes recovered by this process", registry=None)
DELIVERY = Counter("offload_delivery_steps", "Delivery steps that changed a ledger row, by outcome "
                   "(claimed = one delivery attempt)", ["outcome"], registry=None)
LEDGER_ERRORS = Counter("offload_ledger_errors", "Ledger operations that failed, by kind", ["kind"], registry=None)
_ALL = (DISPATCH_LATENCY, COMPLETION_LATENCY, INTERRUPTS, RECOVERIES, DELIVERY,
        LEDGER_ERRORS)


class _Metrics(Collector):
    def collect(self) -> Iterator[Any]:
        for metric in _ALL:
            yield from metric.collect()


COLLECTOR = _Metrics()
_installed = False
_install_lock = threading.Lock()


def ledger_error(kind: str) -> None:
    LEDGER_ERRORS.labels(kind=kind).inc()


def observe(kind: str, delegation_id: str, fields: dict[str, Any]) -> None:
    """The observer: one branch per kind of engine notification."""
    if kind == "dispatching":
        fields["record"]["_obs_dispatch_t0"] = time.perf_counter()
    elif kind == "dispatched":
        t0 = fields["record"].get("_obs_dispatch_t0")
        if t0 is not None:
            DISPATCH_LATENCY.observe(time.perf_counter() - t0)
    elif kind == "finalized":
        record = fields["record"]
        if record.get("dispatched_at") and record.get("completed_at"):
            COMPLETION_LATENCY.observe(max(0.0, record["completed_at"] - record["dispatched_at"]))
    elif kind == "interrupted":
        INTERRUPTS.labels(reason=fields.get("reason") or "-").inc()
    elif kind == "recovered":
        RECOVERIES.inc()
    elif kind == "delivery":
        DELIVERY.labels(outcome=fields["outcome"]).inc()
    elif kind == "ledger_error":
        ledger_error(fields.get("kind") or "error")


def install() -> None:
    """Start counting (idempotent)."""
    global _installed
    with _install_lock:
        if not _installed:
            add_observer(observe)
            _installed = True
