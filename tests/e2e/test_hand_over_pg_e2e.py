"""Closing a client hands its work over on PostgreSQL too (issue 44, point 4): SIGTERM of
``offload run`` while its child's side-effecting command runs gives the unit back to the shared
queue in one fenced write (the lease token cleared); no worker is started for you there, and a
real ``offload worker`` (here on the same test server, as any host's would) takes it at once,
continues the child from its last step (the command ran once), and ``run --resume`` delivers
the result to the session, once."""
from __future__ import annotations

import threading

import pytest
import yaml

from offload.testing.demo_script import request_role
from tests.e2e.conftest import until
from tests.e2e.test_hand_over_e2e import marking_parent, sigterm_mid_command

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
WORKER_UP = r"offload worker on \S+ \(pid (\d+)\)"


def test_sigterm_of_run_hands_the_unit_to_the_shared_queue_and_a_worker_finishes_it(
        shared_ledger, cli, model_server, write_config, runtime, workspace, _isolated_hermes_home):
    gone = threading.Event()
    server = model_server(marking_parent(gone))
    write_config(server, resume="auto")
    config = _isolated_hermes_home / "config.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "ledger": {"url": shared_ledger}}))
    run, did, sid, marker = sigterm_mid_command(cli, workspace)
    row = runtime.ledger().get(did)
    assert row.state == "queued" and row.task["durable"]["after"]["handed_over"] is True, row
    gone.set()
    worker = cli("worker", "-c", "1")
    worker.wait_for(WORKER_UP)
    row = until(lambda: (r := runtime.ledger().get(did)) is not None and r.state == "completed" and r,
                "the worker finished the handed-over child")
    entry = row.result["results"][0]
    assert entry["status"] == "completed" and entry["summary"] == "Marked it once. Done.", row.result
    assert entry["resumed"]["after"]["handed_over"] is True and entry["resumed"]["unknown_calls"] == []
    assert marker.read_text().splitlines() == ["ran"]  # executed exactly once
    assert len([r for r in server.requests if request_role(r) == "subagent"]) == 3  # the cut call, once more
    again = cli("run", "--resume", sid)
    assert again.finish(timeout_s=60) == 0, again.output
    assert "The handed-over child is done." in again.output
    assert runtime.ledger().get(did).delivery_state == "delivered"
