"""A real stall is counted on ``/metrics`` by a dashboard in another process (issue 42, item 4):
an ``offload run`` whose child hangs is interrupted by the stall monitor, the child honours the
interrupt and the unit finishes ``interrupted`` with ``stop_reason`` ``stall``; a separate
``offload dashboard`` then counts it as ``offload_units_finished_total{state="stalled"}`` (not
``interrupted``) and in ``offload_stalls_total``, read from the ledger -- and still does after
prune deleted the row (the prune tally keeps it as ``stalled``)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from offload.runtime import Offload
from offload.testing.model_server import hang_reply, text_reply
from tests.dashboard.conftest import serve_cli_dashboard
from tests.e2e.conftest import cli_env, scripted_parent, workspace, write_config  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(120)


def _scrape(env: dict[str, str]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One scrape of ``/metrics`` from a fresh ``offload dashboard`` process, by (sample, labels)."""
    for served in serve_cli_dashboard(env=env):
        answer = served.get("/metrics", timeout=30)
        assert answer.status_code == 200, answer.text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(answer.text) for s in family.samples}
    raise AssertionError("offload dashboard did not start")


def _stalls(scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> tuple[float, float, float]:
    return (scraped[("offload_units_finished_total", (("state", "stalled"),))],
            scraped[("offload_units_finished_total", (("state", "interrupted"),))],
            scraped[("offload_stalls_total", ())])


def test_a_stall_in_another_process_is_counted_by_the_dashboard_and_survives_prune(
        model_server, write_config, _isolated_hermes_home):
    server = model_server(scripted_parent(child=lambda r: hang_reply("reading the build log…"),
                                          delegate={"goal": "summarise the build log"},
                                          on_result=text_reply("The subagent stalled.")))
    write_config(server, stall_idle_seconds=2)
    env = cli_env(HERMES_HOME=str(_isolated_hermes_home))
    done = subprocess.run([sys.executable, "-m", "offload", "run", "--json", "go"], capture_output=True, text=True,
                          timeout=90, stdin=subprocess.DEVNULL, env=env)
    (unit,) = json.loads(done.stdout)["delegations"]
    assert (unit["state"], unit["stop_reason"]) == ("interrupted", "stall"), done.stderr

    assert _stalls(_scrape(env)) == (1, 0, 1)  # a stall under stalled, not interrupted

    with Offload(home=_isolated_hermes_home) as off:
        deleted = off.ledger().prune(time.time() + 3600, retention_s=0, max_settled=0)
    assert deleted == 1, "the settled row should have been pruned"
    after = _scrape(env)
    assert _stalls(after) == (1, 0, 1)  # counters never go down: the tally keeps the stall
    assert ("offload_ledger_units", (("delivery_state", "delivered"), ("state", "interrupted"))) not in after
