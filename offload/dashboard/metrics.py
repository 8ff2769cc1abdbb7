"""``/metrics`` in the Prometheus text format (prometheus-client).

Two kinds of figure:
- read from the ledger at each scrape, so they match it exactly and cover every process:
  units by state and delivery state, delivery attempts, dropped and recovered units;
- counted in this process as things happen (``offload.telemetry.metrics``): dispatch and
  completion latency, stalls, recoveries, delivery attempts and drops, ledger errors by kind.
A scrape never fails because the ledger cannot be read: the error is counted and the
ledger figures are left out of that scrape.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from offload.dashboard import model
from offload.ledger_rows import row_state
from offload.telemetry import metrics as live_metrics

if TYPE_CHECKING:
    from offload.runtime import Offload

CONTENT_TYPE = CONTENT_TYPE_LATEST


class LedgerCollector(Collector):
    """Gauges computed from every row of the runtime's ledger at scrape time."""

    def __init__(self, off: Offload) -> None:
        self.runtime = off

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            rows = model.ledger_rows(self.runtime.ledger())
        except Exception as exc:  # a scrape must still answer; the error is visible as a counter
            live_metrics.ledger_error(getattr(exc, "kind", "error"))
            return
        units = GaugeMetricFamily("offload_ledger_units", "Delegation units in the ledger, by state and delivery "
                                  "state (delivery_state is 'none' while running)", labels=["state", "delivery_state"])
        states = [row_state(r) for r in rows]  # the unit states of offload.engine.states, as every view says
        for (state, delivery), count in sorted(Counter(
                (s, "none" if r.state == "running" else r.delivery_state) for s, r in zip(states, rows)).items()):
            units.add_metric([state, delivery], count)
        yield units
        yield GaugeMetricFamily("offload_ledger_delivery_attempts", "Delivery attempts recorded on ledger rows",
                                value=sum(r.delivery_attempts for r in rows))
        yield GaugeMetricFamily("offload_ledger_recovered_units", "Units recovered after their owner process died "
                                "(state unknown)", value=states.count("unknown"))
        yield GaugeMetricFamily("offload_ledger_stalled_units", "Units reported stalled", value=states.count("stalled"))


def registry(off: Offload) -> CollectorRegistry:
    """A registry with the ledger's gauges and this process's counters and histograms."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LedgerCollector(off))
    reg.register(live_metrics.COLLECTOR)
    return reg


def exposition(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)
