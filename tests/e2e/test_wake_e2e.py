"""#14 item 5, process level: ``offload run`` is a stateless request whose session can be woken.

The first ``offload run`` dispatches in the background, records the result for its raw session
id, and is SIGKILLed before it delivers anything; a later ``offload run --resume SID`` (the
wake-up) delivers that result into the same session exactly once.
"""
from __future__ import annotations

import pytest

from offload.agent.session_store import SessionStore
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import SESSION_RE, parent_requests_with_results, scripted_parent
from tests.e2e.test_run_and_restart_e2e import wait_for_pending_row

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def test_a_result_recorded_for_a_raw_session_id_is_delivered_when_that_session_is_woken(cli, model_server,
                                                                                          write_config, runtime):
    server = model_server(scripted_parent(
        child=lambda r: text_reply("child result 11"), delegate={"goal": "find the number"},
        after_tool=hang_reply("Started; "),  # the request never ends on its own
        on_result=text_reply("Woken with the result: 11.")))
    write_config(server)

    request = cli("run", "find the number for me")
    sid = request.wait_for(SESSION_RE).group(1)
    row = wait_for_pending_row(runtime, sid)  # dispatched in the background (inline would leave no row)
    did = row.delegation_id
    assert (row.origin_session_id, row.delivery_state) == (sid, "pending")
    request.kill()  # SIGKILL: the stateless request is gone before any delivery

    wake = cli("run", "--resume", sid)
    assert wake.finish() == 0
    assert f"background result {did} landed" in wake.output and "child result 11" in wake.output
    assert "agent> Woken with the result: 11." in wake.output
    # The woken run reports its totals (the child part of them is unit-tested in test_usage_rollup).
    assert wake.wait_for(r"tokens used by this run: [1-9][\d,]* in / [1-9][\d,]* out, subagents included")
    assert runtime.deliveries.get(did)["delivery_state"] == "delivered"
    with SessionStore() as store:
        assert store.was_injected(sid, did)
    assert len(parent_requests_with_results(server)) == 1
