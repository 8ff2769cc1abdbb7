"""``/metrics`` tells the truth for every process on the ledger (issue 32, items 4, 5 and 9): a
dashboard that runs nothing itself counts the units `offload run` processes dispatched,
finished and delivered, and a unit whose owner was SIGKILLed is not shown as running."""
from __future__ import annotations

import json
from typing import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.dashboard.conftest import Served, serve_cli_dashboard
from tests.dashboard.test_owner_fate import _killed_mid_run
from tests.e2e.conftest import cli_env, offload, resume_never

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def dashboard_url() -> Iterator[Served]:
    yield from serve_cli_dashboard(env=cli_env())


def scrape(served: Served) -> dict[tuple[str, tuple], float]:
    text = served.get("/metrics").text  # as Prometheus scrapes: Authorization: Bearer TOKEN
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_scrape_counts_units_other_processes_ran_and_a_dead_owners_unit_is_not_running(dashboard_url):
    before = scrape(dashboard_url)
    assert before[("offload_units_dispatched_total", ())] == 0
    assert before[("offload_units_finished_total", (("state", "completed"),))] == 0

    done = offload("run", "--demo-model", "compare the formats")
    assert done.returncode == 0, done
    settled = json.loads(offload("inbox", "--all", "--json").stdout)["settled"]
    assert settled and all(s["state"] == "completed" and s["delivery_state"] == "delivered" for s in settled)
    after = scrape(dashboard_url)
    assert after[("offload_units_dispatched_total", ())] == len(settled)
    assert after[("offload_units_finished_total", (("state", "completed"),))] == len(settled)
    assert after[("offload_units_delivered_total", ())] == len(settled)
    assert after[("offload_units_running", ())] == 0

    # About how a unit recovered unknown is counted: with the default (auto) it would be resumed instead.
    resume_never()
    died = _killed_mid_run()
    crashed = scrape(dashboard_url)
    assert crashed[("offload_units_dispatched_total", ())] == len(settled) + 1
    assert crashed[("offload_units_running", ())] == 0  # its owner is dead: it runs nowhere
    assert crashed[("offload_units_owner_died", ())] == 1
    assert crashed[("offload_ledger_units", (("delivery_state", "none"), ("state", "unknown")))] == 1
    assert ("offload_ledger_units", (("delivery_state", "none"), ("state", "running"))) not in crashed
    assert json.loads(offload("agents", "--json").stdout)["running"][0]["id"] == died  # not yet recovered

    recovered = offload("inbox", "--ack", died)  # a later process recovers and acknowledges it
    assert recovered.returncode == 0, recovered
    final = scrape(dashboard_url)
    assert final[("offload_units_finished_total", (("state", "unknown"),))] == 1
    assert final[("offload_units_delivered_total", ())] == len(settled) + 1
    assert final[("offload_units_owner_died", ())] == 0
