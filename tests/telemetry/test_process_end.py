"""Telemetry survives how a process ends (issue 42, item 1), seen by a loopback OTLP receiver:
an `offload run` told to stop (SIGTERM, SIGHUP) or SIGKILLed seconds after it dispatched still leaves
one connected trace once another process recovers its unit. The batch delay is set to a minute
here, so whatever arrives was sent by the dispatch/turn flush or the signal handler, not by it."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from offload.testing.demo_script import CRASH_PROMPT
from tests.e2e.conftest import cli_env, resume_never
from tests.telemetry.receiver import Tree

pytestmark = pytest.mark.timeout(120)
_NO_BATCH_DELAY_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "60000", "OTEL_METRIC_EXPORT_INTERVAL": "600000"}


def _owner(receiver) -> subprocess.Popen:
    # About the trace of a unit recovered by `inbox --ack`: resuming it (the default) is another trace.
    resume_never()
    env = cli_env(**receiver.env(OTEL_SERVICE_NAME="offload-owner", **_NO_BATCH_DELAY_EXPORT))
    return subprocess.Popen([sys.executable, "-m", "offload", "run", "--demo-model", CRASH_PROMPT], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _dispatched_and_turned(receiver, proc: subprocess.Popen) -> str:
    """Wait for the owner's dispatch and turn spans (flushed as they end); the delegation id."""
    try:
        spans = receiver.wait_for(lambda got: {"offload.delegation.dispatch", "offload.turn"} <= {s.name for s in got},
                                  timeout_s=60)
    except AssertionError:
        proc.kill()
        raise AssertionError(f"the owner never flushed its dispatch and turn spans: {proc.communicate()[1]}")
    return next(s for s in spans if s.name == "offload.delegation.dispatch").attributes["offload.delegation_id"]


def _recover(receiver, delegation_id: str) -> Tree:
    """``offload inbox --ack`` in another process recovers the unit; the trace once it is in."""
    acked = subprocess.run([sys.executable, "-m", "offload", "inbox", "--ack", delegation_id], capture_output=True,
                           text=True, timeout=60, env=cli_env(**receiver.env(OTEL_SERVICE_NAME="offload-inbox")))
    assert acked.returncode == 0 and f"acknowledged {delegation_id}" in acked.stdout, acked.stderr
    spans = receiver.wait_for(lambda got: any(s.name == "offload.delegation.delivery" for s in got))
    (dispatch,) = [s for s in spans if s.name == "offload.delegation.dispatch"]
    return Tree(spans, dispatch.trace_id)


def _assert_connected(tree: Tree, delegation_id: str, killed: bool = False) -> None:
    """One trace from the owner's turn down to the recovering process's spans, nothing orphaned.

    A signal ends the slow child's span (and its calls) before the flush, so it hangs under the
    unit too. A SIGKILL cannot: the model calls the slow child had finished were exported by the
    quick child's flush, but their subagent span never ended, so they alone may hang from a
    span nobody exported (docs/telemetry.md, "When telemetry leaves a process")."""
    orphans = [s for s in tree.orphans if not (killed and s.service == "offload-owner" and s.name.startswith("chat "))]
    assert not orphans, [(s.name, s.service) for s in orphans]
    (root,) = [s for s in tree.spans if s.parent_id is None]
    assert (root.name, root.service) == ("offload.turn", "offload-owner")
    dispatch, unit = tree.one("offload.delegation.dispatch"), tree.one("offload.delegation")
    assert dispatch.service == "offload-owner" and unit.service == "offload-inbox"
    assert unit.parent_id == dispatch.span_id and unit.attributes["offload.delegation_id"] == delegation_id
    call = tree.by_id[dispatch.parent_id]
    assert call.name == "offload.tool_call" and call.attributes["offload.tool"] == "delegate_task"
    assert tree.one("offload.delegation.recovered").parent_id == unit.span_id
    owners = {s.attributes["offload.task_index"]: s for s in tree.children(unit, "offload.subagent")
              if s.service == "offload-owner"}
    assert "offload.ended_by" not in owners[0].attributes  # the quick child: flushed as it finished
    if killed:
        assert sorted(owners) == [0]
    else:  # the slow child, still running: ended by the signal's handler, and said so
        assert sorted(owners) == [0, 1] and owners[1].attributes["offload.ended_by"].startswith("SIG")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_flushes_spans_and_metrics_then_ends_the_run_as_before(receiver, signum):
    proc = _owner(receiver)
    delegation_id = _dispatched_and_turned(receiver, proc)
    receiver.wait_for(lambda got: any(s.name == "offload.subagent" for s in got))  # the quick child is in
    assert "gen_ai.client.operation.duration" not in receiver.metric_names()  # metrics wait for a flush
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == -signum, stderr  # died of the signal, as without a handler (shell: 143, 129)
    points = receiver.wait_for_points(lambda got: any(p.metric == "gen_ai.client.operation.duration" for p in got),
                                      timeout_s=5)
    assert sum(p.count for p in points if p.metric == "gen_ai.client.operation.duration") >= 2  # the parent's calls
    _assert_connected(_recover(receiver, delegation_id), delegation_id)


def test_a_sigkill_seconds_after_dispatch_still_leaves_a_connected_trace(receiver):
    proc = _owner(receiver)
    delegation_id = _dispatched_and_turned(receiver, proc)
    receiver.wait_for(lambda got: any(s.name == "offload.subagent" for s in got))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    _assert_connected(_recover(receiver, delegation_id), delegation_id, killed=True)
