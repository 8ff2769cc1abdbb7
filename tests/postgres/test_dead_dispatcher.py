"""A worker-run result whose dispatcher died is delivered by a live consumer of its session on
any host (issue 27): host A queues a unit with ``delegation.run_on: workers`` and is SIGKILLed
about a second later; an ``offload worker`` on host B runs it to ``completed``; a consumer
already running on host B delivers it within seconds, though the finished row's owner (the
worker) is a live process on that host which never delivers anything. Nothing is restarted on
host A, and the claim lease and orphan sweep are far too long to be what delivers it."""
from __future__ import annotations

import signal
import sys
import time

import pytest

from tests.postgres.conftest import Host
from tests.postgres.test_cross_host_delivery import NOTIFY_ONLY_S, consumer, tagged

pytestmark = pytest.mark.timeout(120)
SESSION = "sess_dead_dispatcher"
DELIVERED_WITHIN_S = 10.0


def test_a_workers_result_reaches_the_live_consumer_on_its_host_after_the_dispatcher_died(
        hosts, tmp_path, pg_schema, model_server):
    from offload.testing.model_server import text_reply

    server = model_server(lambda request: text_reply("the worker's answer"))
    b_consumer = consumer(hosts, tmp_path, pg_schema.url, "host-b", "deliver", NOTIFY_ONLY_S, NOTIFY_ONLY_S)
    b_worker = Host(tmp_path, "host-b", pg_schema.url, "", argv=[sys.executable, "-m", "offload", "worker"],
                    config={"model": "demo-model", "base_url": server.url})
    hosts.append(b_worker)
    b_worker.wait_for("offload worker on")
    a_dispatcher = Host(tmp_path, "host-a", pg_schema.url, "host_dispatcher.py", SESSION, "count the files")
    hosts.append(a_dispatcher)
    did = a_dispatcher.wait_for("Q ").split()[1]
    time.sleep(1.0)  # the fault: the dispatcher dies about a second after dispatching (issue 27's plan)
    a_dispatcher.signal(signal.SIGKILL)

    finished = b_worker.wait_for(f"finished {did}")
    assert finished.endswith("completed"), finished
    finished_at = time.monotonic()
    b_consumer.wait_for(f"D {did}", timeout_s=DELIVERED_WITHIN_S)
    took_s = time.monotonic() - finished_at
    assert took_s < DELIVERED_WITHIN_S
    assert tagged(b_consumer.finish(), "D") == {did: 1}
