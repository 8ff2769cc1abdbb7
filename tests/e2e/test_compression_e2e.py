"""#14 item 7, process level: a result dispatched before context compression is delivered to the
live session at the tip of the lineage, even when the process is SIGKILLed between the
compression and the delivery; the compressed-away session never receives it.
"""
from __future__ import annotations

import threading
import time

import pytest
import yaml

from offload.agent.compression import SUMMARIZER_PROMPT
from offload.agent.session_store import SessionStore
from offload.testing.model_server import hang_reply, last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import SESSION_RE, parent_requests_with_results
from tests.e2e.test_run_and_restart_e2e import wait_for_pending_row

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LONG = "LONG " + "please keep all of this in mind. " * 120


def script(child_gate: threading.Event):
    from offload.testing.demo_script import last_role, request_role

    def reply(request):
        first = (request.get("messages") or [{}])[0].get("content") or ""
        text = last_message_text(request)
        if request_role(request) == "subagent":
            child_gate.wait(60)  # the child finishes only after the parent's context was compressed
            return text_reply("child result 7")
        if first == SUMMARIZER_PROMPT:
            return text_reply("SUMMARY: the user asked for the number; a subagent is finding it.")
        if last_role(request) == "tool":
            return text_reply("Started.")
        if text.startswith("[ASYNC DELEGATION"):
            return text_reply("Result noted: 7.")
        if text == "go":
            return tool_call_reply("delegate_task", {"goal": "find the number"})
        if text.startswith("LONG"):
            return hang_reply("thinking")  # the turn after compression never ends: nothing is delivered
        return text_reply("ok")
    return reply


def wait_for_successor(session_id: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with SessionStore() as store:
            tip = store.live_tip(session_id)
        if tip and tip != session_id:
            return tip
        time.sleep(0.05)
    pytest.fail(f"session {session_id} was never compressed within {timeout_s} s")


def test_sigkill_between_compression_and_delivery_delivers_to_the_live_tip(cli, model_server, write_config,
                                                                           _isolated_hermes_home, runtime):
    gate = threading.Event()
    server = model_server(script(gate))
    data = write_config(server)
    data.update(context_window_tokens=1000, compress_at_ratio=0.8)
    (_isolated_hermes_home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")

    first = cli("chat")
    sid = first.wait_for(SESSION_RE).group(1)
    first.send("go")
    first.wait_for(r"agent> Started\.")
    first.send("small talk")
    first.wait_for(r"agent> ok")
    first.send(LONG)  # passes the threshold: old turns are summarised into a successor session
    tip = wait_for_successor(sid)
    gate.set()
    row = wait_for_pending_row(runtime, sid)  # recorded for the session that dispatched it, before compression
    assert row.state == "completed" and row.delivery_state == "pending"
    first.kill()  # SIGKILL between compression and delivery
    assert "landed" not in first.output

    second = cli("chat", "--resume", sid)  # resuming the old id continues at the live tip
    second.wait_for(rf"session {tip}")
    second.wait_for(rf"background result {row.delegation_id} landed \(replayed from the ledger\)")
    second.wait_for(r"agent> Result noted: 7\.")
    second.send("/quit")
    assert second.finish() == 0
    assert runtime.deliveries.get(row.delegation_id)["delivery_state"] == "delivered"
    with SessionStore() as store:
        assert store.was_injected(tip, row.delegation_id)
        assert not store.was_injected(sid, row.delegation_id)
        tip_messages = store.load_messages(tip)
    assert any("SUMMARY: the user asked for the number" in str(m.get("content")) for m in tip_messages)
    assert len(parent_requests_with_results(server)) == 1
