"""A real stall is seen in time and counted (issue 42, item 4), seen by a loopback OTLP receiver:
an `offload run` whose child hangs mid-stream, with a 2 s stall threshold and the default 30 s
check interval, interrupts it within a fraction of the threshold (the check cadence fits the
threshold), the unit span's ``stall`` event says how long the child was quiet and in which phase,
and the ``offload.stalls`` counter pushed over OTLP counts it although the child honoured the
interrupt (the unit finishes ``interrupted``, with ``stop_reason`` ``stall``: issue 41), as does
``offload_ledger_stalled_units`` on ``/metrics``, read from the ledger."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from prometheus_client.parser import text_string_to_metric_families

from offload.dashboard import metrics as dashboard_metrics
from offload.runtime import Offload
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import cli_env, scripted_parent, workspace, write_config  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(120)
THRESHOLD_S = 2


def test_a_stall_with_a_short_threshold_is_seen_in_time_and_counted(model_server, write_config, receiver,
                                                                    _isolated_hermes_home):
    server = model_server(scripted_parent(child=lambda r: hang_reply("reading the build log…"),
                                          delegate={"goal": "summarise the build log"},
                                          on_result=text_reply("The subagent stalled.")))
    write_config(server, stall_idle_seconds=THRESHOLD_S)  # the check interval stays the default 30 s
    done = subprocess.run([sys.executable, "-m", "offload", "run", "--json", "go"], capture_output=True, text=True,
                          timeout=90, stdin=subprocess.DEVNULL,
                          env=cli_env(HERMES_HOME=str(_isolated_hermes_home), **receiver.env()))
    (unit_result,) = json.loads(done.stdout)["delegations"]
    assert unit_result["state"] == "interrupted", done.stderr  # the child honoured the interrupt

    spans = receiver.wait_for(lambda got: any(s.name == "offload.delegation" for s in got))
    (unit,) = [s for s in spans if s.name == "offload.delegation"]
    stall = dict(unit.events)["stall"]
    assert stall["offload.phase"] == "idle" and stall["offload.threshold_s"] == THRESHOLD_S
    # seen within a quarter of the threshold past it (before: up to one 30 s interval late)
    assert THRESHOLD_S <= stall["offload.quiet_s"] <= THRESHOLD_S * 1.25 + 1.0, stall
    assert unit.attributes["offload.stop_reason"] == "stall" and unit.attributes["offload.status"] == "interrupted"
    points = receiver.wait_for_points(lambda got: any(p.metric == "offload.stalls" for p in got))
    assert [(p.attributes, p.count) for p in points if p.metric == "offload.stalls"] == [
        ({"offload.stall.phase": "idle"}, 1)]
    # /metrics, read from the ledger by any process on it, counts the stall too
    with Offload(home=_isolated_hermes_home) as off:
        scraped = dashboard_metrics.exposition(dashboard_metrics.registry(off)).decode()
    gauges = {s.name: s.value for f in text_string_to_metric_families(scraped) for s in f.samples}
    assert gauges["offload_ledger_stalled_units"] == 1
