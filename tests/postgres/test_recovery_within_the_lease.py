"""Recovery across hosts within the lease, as docs/postgres.md says (issue 41, point 9): with no
``offload worker`` running and a consumer already up on another host, a SIGKILLed owner's
running unit is recovered (``unknown``) and delivered there once the owner's lease expires —
by the consumer's claim check (every ``claim_check_interval_s``), not at its next orphan sweep,
which this consumer would only run in an hour."""
from __future__ import annotations

import signal
import time

import pytest

from tests.postgres.conftest import LEASE_S, Host
from tests.postgres.test_cross_host_delivery import NOTIFY_ONLY_S

pytestmark = pytest.mark.timeout(120)
CLAIM_CHECK_S = 2.0  # the default claim_check_interval_s
SLACK_S = 5.0  # process start-up, heartbeats and scheduling on a loaded machine


def test_a_dead_owners_unit_is_delivered_on_another_host_within_the_lease(hosts, tmp_path, pg_schema):
    b_consumer = Host(tmp_path, "host-b", pg_schema.url, "host_consumer.py", "deliver", str(NOTIFY_ONLY_S),
                      str(NOTIFY_ONLY_S), "0.2")
    hosts.append(b_consumer)
    b_consumer.wait_for("LISTENING")
    a_owner = Host(tmp_path, "host-a", pg_schema.url, "host_owner.py", "hang")
    hosts.append(a_owner)
    did = a_owner.wait_for("D ").split()[1]
    a_owner.signal(signal.SIGKILL)
    killed_at = time.monotonic()

    b_consumer.wait_for(f"D {did}", timeout_s=LEASE_S + CLAIM_CHECK_S + SLACK_S)
    assert time.monotonic() - killed_at < LEASE_S + CLAIM_CHECK_S + SLACK_S
