"""Issue 43 point 3, measured: 200 clients wait in ``delegation_result`` on one ``offload mcp
--http`` while another client's ``delegation_status`` is timed (``bench.probes.mcp_waits``). The figures
are printed (run with ``-s``); what is asserted is behaviour: every wait was still open while
the status calls ran (a wait holds no thread, so none was cut short and none starved the
probe), every waiter got the completed result once released, and SIGTERM with a wait open ends
the server (the wait ends at once, not after its wait_s)."""
from __future__ import annotations

import json

import pytest

from bench.probes import mcp_waits

pytestmark = pytest.mark.timeout(300)
WAITERS = 200


def test_200_waiters_do_not_block_another_client_s_status(capsys):
    figures = mcp_waits.run(n_waiters=WAITERS, n_probes=100, wait_s=120.0)
    with capsys.disabled():
        print("\nbench.mcp_waits:", json.dumps(figures))
    assert figures["waiting_while_probed"] == WAITERS
    assert figures["waiters_completed"] == WAITERS
    assert figures["sigterm_exit_s_with_a_wait_open"] < 60  # the open wait_s=120 did not hold the shutdown
