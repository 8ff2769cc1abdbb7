"""A result whose turn failed is not acknowledged: ``offload run --resume`` with the parent's
endpoint down leaves it pending (no delivery attempt spent), says so, exits 3, and the next
resume with the endpoint back injects it once."""
from __future__ import annotations

import json

import pytest
import yaml

from offload.agent.session_store import SessionStore
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import SESSION_RE, offload, parent_requests_with_results, scripted_parent
from tests.e2e.test_exit_codes import closed_port_url
from tests.e2e.test_run_and_restart_e2e import wait_for_pending_row

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def point_at(home, url: str) -> None:
    path = home / "config.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["base_url"] = url
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


def test_a_result_whose_turn_failed_stays_pending_and_is_injected_once_later(
        cli, model_server, write_config, runtime, _isolated_hermes_home):
    server = model_server(scripted_parent(
        child=lambda r: text_reply("child result 7"), delegate={"goal": "find the number"},
        after_tool=hang_reply("Started; "), on_result=text_reply("Replayed result noted: 7.")))
    write_config(server)
    first = cli("chat")
    sid = first.wait_for(SESSION_RE).group(1)
    first.send("go")
    did = wait_for_pending_row(runtime, sid).delegation_id
    first.kill()  # a crash: the result was recorded, never delivered

    point_at(_isolated_hermes_home, closed_port_url())  # the parent's endpoint is down
    down = offload("run", "--resume", sid)
    assert down.returncode == 3, down
    assert f"background result {did} landed" in down.stderr
    assert "the result stays pending (not acknowledged)" in down.stderr, down.stderr
    row = runtime.deliveries.get(did)
    assert row["delivery_state"] == "pending" and row["delivery_attempts"] == 0  # an outage spends no attempt
    inbox = json.loads(offload("inbox", "--json").stdout)
    assert did in json.dumps(inbox)

    point_at(_isolated_hermes_home, server.url)
    up = offload("run", "--resume", sid)
    assert up.returncode == 0, up
    assert "Replayed result noted: 7." in up.stdout
    assert runtime.deliveries.get(did)["delivery_state"] == "delivered"
    assert len(parent_requests_with_results(server)) == 1
    with SessionStore() as store:
        texts = [m.get("content") or "" for m in store.load_messages(sid) if m.get("role") == "user"]
    assert sum("child result 7" in t for t in texts) == 1  # stored in the session once, by the turn that took it
