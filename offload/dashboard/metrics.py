"""``/metrics`` in the Prometheus text format (prometheus-client).

Two kinds of figure:
- read from the ledger at each scrape, so they cover every process that shares it (``run``,
  ``chat``, ``worker``, the gateway, other hosts) and match it exactly: units dispatched,
  finished by state (a unit the stall monitor stopped counted ``stalled``, whatever state it
  finished in), stalls, delivered and dropped (counters over the ledger's life: units that prune
  deleted stay counted, ``offload.ledger.tally``), units running, queued and awaiting delivery
  (gauges), and units by state and delivery state. A running unit whose owner process died is
  not running: it is counted ``unknown`` (what recovery will settle it as) and in
  ``offload_units_owner_died`` until a process recovers it. A scrape is two aggregate reads
  plus the running rows (as many as run at once), never a read of every row;
- counted in this process as things happen (``offload.telemetry.metrics``): dispatch and
  completion latency, interrupts, recoveries, delivery attempts and drops, ledger errors by kind.
A scrape never fails because the ledger cannot be read: the error is counted and the
ledger figures are left out of that scrape.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from offload.engine.liveness import owner_alive
from offload.engine.states import QUEUED, RUNNING, STALLED, TERMINAL_UNIT_STATES, UNFINISHED, UNKNOWN, unit_state
from offload.ledger import queries as ledger_queries
from offload.ledger.tally import UnitCounts, tallied_state
from offload.telemetry import metrics as live_metrics

if TYPE_CHECKING:
    from offload.runtime import Offload

CONTENT_TYPE = CONTENT_TYPE_LATEST
Key = tuple[str, str]


class LedgerCollector(Collector):
    """Counters and gauges computed from the runtime's ledger at scrape time."""

    def __init__(self, off: Offload) -> None:
        self.runtime = off

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        try:
            ledger = self.runtime.ledger()
            counts = ledger_queries.unit_counts(ledger, since=0.0)  # since: the early stops by stop_reason too
            died = sum(1 for row in ledger_queries.running_rows(ledger) if ledger.is_abandoned(row, owner_alive))
        except Exception as exc:  # a scrape must still answer; the error is visible as a counter
            live_metrics.ledger_error(getattr(exc, "kind", "error"))
            return
        yield from _counters(counts)
        yield from _gauges(counts, died)


def _words(keys: Counter[Key] | dict[Key, int]) -> Counter[Key]:
    """The same counts keyed by today's unit-state words (a foreign stored word reads ``unknown``)."""
    out: Counter[Key] = Counter()
    for (state, delivery), units in keys.items():
        out[(unit_state(state), delivery)] += units
    return out


def _counters(counts: UnitCounts) -> Iterator[CounterMetricFamily]:
    ever = _words(counts.ever())
    yield CounterMetricFamily("offload_units_dispatched", "Units dispatched (run or queued) by every process "
                              "on this ledger", value=sum(ever.values()))
    finished = CounterMetricFamily("offload_units_finished", "Units that reached a terminal state, by state "
                                   "(unknown: recovered after their owner died)", labels=["state"])
    by_state = _finished_by_state(ever, counts)
    for state, units in sorted(by_state.items()):
        finished.add_metric([state], units)
    yield finished
    yield CounterMetricFamily("offload_stalls", "Units the stall monitor stopped for lack of progress, in every "
                              "process on this ledger, counted when the unit finishes", value=by_state[STALLED])
    for delivery in ("delivered", "dropped"):
        yield CounterMetricFamily(f"offload_units_{delivery}", f"Finished units whose result was {delivery}",
                                  value=sum(n for (_s, d), n in ever.items() if d == delivery))


def _finished_by_state(ever: Counter[Key], counts: UnitCounts) -> Counter[str]:
    """Finished units by state, a unit the stall monitor stopped (``stop_reason`` stall) under
    ``stalled`` instead of the state it finished in (mostly ``interrupted``), as prune tallies it."""
    by_state = Counter({state: 0 for state in TERMINAL_UNIT_STATES})
    for (state, _delivery), units in ever.items():
        if state not in UNFINISHED:
            by_state[state] += units
    for (state, reason), units in counts.recent_stops.items():  # since=0.0: every finished row
        moved = tallied_state(unit_state(state), reason)
        if moved != unit_state(state):
            by_state[unit_state(state)] -= units
            by_state[moved] += units
    return by_state


def _gauges(counts: UnitCounts, died: int) -> Iterator[GaugeMetricFamily]:
    now = _words(counts.rows)
    running = sum(n for (s, _d), n in now.items() if s in UNFINISHED - {QUEUED})
    awaiting = sum(n for (s, d), n in now.items() if s not in UNFINISHED and d == "pending")
    yield GaugeMetricFamily("offload_units_running", "Units running now (in a live owner process)",
                            value=running - died)
    yield GaugeMetricFamily("offload_units_queued", "Units waiting in the ledger to start (for a free slot, or an offload worker)",
                            value=sum(n for (s, _d), n in now.items() if s == QUEUED))
    yield GaugeMetricFamily("offload_units_awaiting_delivery", "Finished units whose result is not yet "
                            "delivered", value=awaiting)
    yield GaugeMetricFamily("offload_units_owner_died", "Units still marked running whose owner process died: "
                            "the next process to start on this ledger recovers them as unknown", value=died)
    units = GaugeMetricFamily("offload_ledger_units", "Delegation units in the ledger, by state and delivery "
                              "state (delivery_state is 'none' until the unit finishes)",
                              labels=["state", "delivery_state"])
    shown: Counter[Key] = Counter()
    for (state, delivery), count in now.items():
        shown[(state, "none" if state in UNFINISHED else delivery)] += count
    shown[(RUNNING, "none")] -= died  # not running any more: recovery will settle them unknown
    shown[(UNKNOWN, "none")] += died
    for (state, delivery), count in sorted(shown.items()):
        if count:
            units.add_metric([state, delivery], count)
    yield units
    yield GaugeMetricFamily("offload_ledger_delivery_attempts", "Delivery attempts recorded on ledger rows",
                            value=counts.delivery_attempts)
    yield GaugeMetricFamily("offload_ledger_recovered_units", "Units recovered after their owner process died "
                            "(state unknown)", value=sum(n for (s, _d), n in now.items() if s == UNKNOWN))
    # a stall whose child honoured the interrupt finishes interrupted: its stop_reason says stall
    stopped = sum(n for (s, reason), n in counts.recent_stops.items() if tallied_state(s, reason) != s)
    yield GaugeMetricFamily("offload_ledger_stalled_units", "Units the stall monitor stopped: given up (stalled) or "
                            "interrupted for lack of progress (stop_reason stall)",
                            value=stopped + sum(n for (s, _d), n in now.items() if s == STALLED))


def registry(off: Offload) -> CollectorRegistry:
    """A registry with the ledger's figures and this process's histograms and counters."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LedgerCollector(off))
    reg.register(live_metrics.COLLECTOR)
    return reg


def exposition(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)
