"""A crashed delegation's trace is whole (issue 32, item 1), seen by a loopback OTLP receiver: an
`offload run` SIGKILLed mid-unit exports nothing of its unit span, so the process that recovers
the unit emits it from what the ledger recorded at dispatch (its ids, parent, start time and
attributes), with status ERROR and ``.recovered`` and ``.delivery`` under it; it ends when its owner was last
seen alive and holds a ``child finished`` event for each child the row kept (issue 42, item 5)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from offload.ledger import open_ledger
from tests.dashboard.test_owner_fate import _killed_mid_run
from tests.e2e.conftest import cli_env, resume_never
from tests.telemetry.receiver import Tree

pytestmark = pytest.mark.timeout(120)


def test_recovery_emits_the_dead_owners_unit_span_with_recovered_and_delivery_under_it(receiver, tmp_path):
    # About the trace of a unit recovered `unknown`: resuming it (the default) is another trace.
    resume_never()
    env = cli_env(**receiver.env(OTEL_SERVICE_NAME="offload-owner"))
    # Killed once the quick child is recorded: its subagent span may have reached the receiver.
    delegation_id = _killed_mid_run(env, ready=lambda row: row["children"][0]["state"] == "completed")
    killed_by_ns = time.time_ns()  # SIGKILLed (and reaped) just before this
    state_db = cli_env()["HERMES_HOME"] + "/state.db"
    stored = open_ledger(state_db).get(delegation_id).task["trace_context"]
    _version, trace_id, unit_id, _flags = stored["traceparent"].split("-")

    acked = subprocess.run([sys.executable, "-m", "offload", "inbox", "--ack", delegation_id], capture_output=True,
                           text=True, timeout=60, env=cli_env(**receiver.env(OTEL_SERVICE_NAME="offload-inbox")))
    assert acked.returncode == 0 and f"acknowledged {delegation_id}" in acked.stdout, acked.stderr
    spans = receiver.wait_for(lambda got: any(s.name == "offload.delegation.delivery" for s in got))

    tree = Tree(spans, trace_id)
    unit = tree.one("offload.delegation")
    assert (unit.span_id, unit.service) == (unit_id, "offload-inbox")  # the id the owner's spans name
    assert unit.parent_id == stored["parent"]["traceparent"].split("-")[2]  # under the owner's tool call
    assert unit.status == "error" and unit.attributes["offload.status"] == "unknown"
    assert unit.attributes["offload.delegation_id"] == delegation_id and unit.attributes["offload.children"] == 2
    assert unit.start_ns == stored["start_ns"] and unit.start_ns < unit.end_ns
    recovered = tree.one("offload.delegation.recovered")
    # it ends when its owner was last seen alive, not when another process recovered it
    assert unit.end_ns <= killed_by_ns and unit.end_ns < recovered.start_ns
    finished = [attrs for name, attrs in unit.events if name == "child finished"]
    assert finished == [{"offload.task_index": 0, "offload.status": "completed"}]  # the child the row holds
    delivery = tree.one("offload.delegation.delivery")
    assert recovered.parent_id == delivery.parent_id == unit.span_id
    assert recovered.status == "error" and recovered.event_names == ["recovery"]
    assert delivery.attributes["offload.delivery"] == "acknowledged"
    owner_spans = [s for s in tree.spans if s.service == "offload-owner"]  # what the owner got out, if anything
    assert all(s.parent_id in tree.by_id for s in owner_spans if s.name == "offload.subagent")
