"""A stall is told as a stall (issue 41, point 3): ``offload run`` whose child hangs on its
model endpoint gets the child's partial result ``interrupted`` with ``stop_reason: stall``,
prints why beside the landed result, lists it so in ``agents``, and exits 7, not 0."""
from __future__ import annotations

import json

import pytest

from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import HANDLE_RE, offload, scripted_parent

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_run_whose_child_stalled_says_so_and_exits_7(cli, model_server, write_config):
    server = model_server(scripted_parent(child=lambda r: hang_reply("reading the build log…"),
                                          delegate={"goal": "summarise the build log"},
                                          on_result=text_reply("The subagent stalled; I will retry later.")))
    write_config(server, stall_idle_seconds=1, stall_grace_seconds=5, stall_check_interval_seconds=0.2)
    run = cli("run", "--json", "go")
    code = run.finish(timeout_s=90)
    did = run.wait_for(HANDLE_RE).group(1)
    assert code == 7, run.output
    run.wait_for(rf"background result {did} landed: Subagent Task Interrupted: summarise the build log "
                 r"\(stalled: no progress for \d+ s\)")
    run.wait_for(r"background work stopped early \(stalled, or stopped by a user\) \(exit 7\)")
    document = json.loads(run.output[run.output.index('{\n  "schema": "offload.run/1"'):])
    [unit] = document["delegations"]
    assert unit["state"] == "interrupted" and unit["stop_reason"] == "stall" and unit["stall_quiet_s"] >= 1
    assert document["exit_code"] == 7

    agents = offload("agents")
    assert f"{did}  interrupted (stalled: no progress for" in agents.stdout, agents.stdout


def test_a_unit_a_user_stopped_elsewhere_exits_7_and_says_so(cli, model_server, write_config):
    server = model_server(scripted_parent(child=lambda r: hang_reply("thinking…"),
                                          delegate={"goal": "count the stars"},
                                          on_result=text_reply("Stopped, as asked.")))
    write_config(server)
    run = cli("run", "go")
    did = run.wait_for(HANDLE_RE).group(1)
    assert server.wait_for_requests(3, timeout_s=30)  # parent, its tool round, the child at work
    stopped = offload("stop", did)
    assert stopped.returncode == 0, stopped
    assert run.finish(timeout_s=60) == 7, run.output
    run.wait_for(rf"background result {did} landed: Subagent Task Interrupted: count the stars \(stopped by a user\)")
