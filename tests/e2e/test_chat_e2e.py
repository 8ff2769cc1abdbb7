"""``offload chat`` end to end: background delegation, re-injection, stall, rejected model, /stop."""
from __future__ import annotations

import threading

import pytest

from offload.agent.session_store import SessionStore
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, delegating_chat, parent_requests_with_results, scripted_parent

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def test_background_result_is_reinjected_as_a_new_turn_while_idle(cli, model_server, write_config, runtime):
    release_child = threading.Event()

    def child(request):
        release_child.wait(30)  # the child stays mid-call until the roster has been checked
        return text_reply("The answer is 42.", chunk_chars=4)

    server = model_server(scripted_parent(child=child, delegate={"goal": "compute the answer"},
                                          on_result=text_reply("Noted: the subagent found 42.")))
    write_config(server)
    chat = cli("chat")
    try:
        sid = chat.wait_for(SESSION_RE).group(1)
        chat.send("please work this out in the background")
        did = chat.wait_for(HANDLE_RE).group(1)
        chat.wait_for(r"agent> Started it in the background\.")
        mark = chat.mark()
        chat.send("/agents")
        chat.wait_for(rf"{did}\s.*running", start=mark)
        chat.wait_for(r"#1 .*api calls .*compute the answer", start=mark)
    finally:
        release_child.set()
    chat.wait_for(rf"background result {did} landed")
    chat.wait_for(r"agent> Noted: the subagent found 42\.")
    chat.send("/quit")
    assert chat.finish() == 0
    assert "Traceback" not in chat.output

    [injected] = parent_requests_with_results(server)
    assert injected["messages"][-2] == {"role": "assistant", "content": "Started it in the background."}
    assert "The answer is 42." in injected["messages"][-1]["content"]  # a new turn after the finished one
    with SessionStore() as store:
        assert store.was_injected(sid, did)
        contents = [m.get("content") or "" for m in store.load_messages(sid)]
    assert any(c.startswith(f"[ASYNC DELEGATION COMPLETE — {did}]") for c in contents)
    assert contents[-1] == "Noted: the subagent found 42."
    assert runtime.deliveries.get(did)["delivery_state"] == "delivered"


def test_a_stalled_child_is_interrupted_and_reported(cli, model_server, write_config):
    server = model_server(scripted_parent(child=lambda r: hang_reply("thinking…"), delegate={"goal": "slow work"},
                                          on_result=text_reply("The subagent stalled; I will retry later.")))
    write_config(server, stall_idle_seconds=1, stall_grace_seconds=1, stall_check_interval_seconds=0.2)
    chat, did = delegating_chat(cli, started=False)
    mark = chat.mark()
    chat.wait_for(rf"background result {did} landed: Subagent Task Interrupted", start=mark)
    chat.wait_for(r"■ slow work \(interrupted, [\d.]+ s\)", start=mark)  # the user's one-line summary
    chat.wait_for(r"agent> The subagent stalled", start=mark)
    chat.send("/quit")
    assert chat.finish() == 0


def test_a_rejected_subagent_model_is_reported_once(cli, model_server, write_config, runtime):
    server = model_server(scripted_parent(child=lambda r: text_reply("unused"),
                                          delegate={"tasks": [{"goal": "first"}, {"goal": "second"}]},
                                          on_result=text_reply("The subagent model is misconfigured.")),
                          model_ids=("demo-model",))
    write_config(server, model="no-such-model")
    chat, did = delegating_chat(cli, started=False)
    landed = chat.wait_for(rf"background result {did} landed")
    chat.wait_for(r"agent> The subagent model is misconfigured\.", start=chat.lines.index(landed.string))
    chat.send("/quit")
    assert chat.finish() == 0
    assert chat.output.count("SUBAGENT MODEL REJECTED") == 1
    [injected] = parent_requests_with_results(server)  # the notice, if any, is not counted as the result
    text = injected["messages"][-1]["content"]
    assert text.count("SUBAGENT MODEL REJECTED") == 1
    assert text.index("SUBAGENT MODEL REJECTED") < text.index("TASK 1/2")
    # Both children fail at once: at most one early warning for the unit, shown before the result.
    notices = parent_requests_with_results(server, interim=True)
    assert len(notices) <= 1 and chat.output.count("a task failed while the others still run") == len(notices)
    assert runtime.deliveries.get(did)["delivery_state"] == "delivered"


def chat_with_an_endless_child(cli, model_server, write_config, on_result: str):
    """A chat whose one background child hangs mid-stream; returns the chat and the unit's id."""
    server = model_server(scripted_parent(child=lambda r: hang_reply("working…"), delegate={"goal": "endless"},
                                          on_result=text_reply(on_result)))
    write_config(server)
    chat, did = delegating_chat(cli)
    assert server.wait_for_requests(3, timeout_s=30)  # parent ×2 and the child, now hanging mid-stream
    return chat, did


def test_slash_stop_interrupts_a_slow_child_and_the_result_is_reported(cli, model_server, write_config):
    chat, did = chat_with_an_endless_child(cli, model_server, write_config, "Stopped as you asked.")
    mark = chat.mark()
    chat.send("/stop")
    chat.wait_for(r"stopped 1 background delegation", start=mark)
    chat.wait_for(rf"background result {did} landed: Subagent Task Interrupted", start=mark)
    chat.wait_for(r"■ endless \(interrupted", start=mark)
    chat.wait_for(r"agent> Stopped as you asked\.", start=mark)
    mark = chat.mark()
    chat.send(f"/show {did[len('deleg_'):][:6]}")  # the full block, by a unique id prefix
    chat.wait_for(rf"\[ASYNC DELEGATION (BATCH )?COMPLETE — {did}\]", start=mark)
    chat.wait_for(r"status=interrupted", start=mark)
    chat.send("/quit")
    assert chat.finish() == 0


def test_offload_stop_from_another_terminal_stops_one_unit_of_a_chat(cli, model_server, write_config):
    from tests.e2e.conftest import offload

    chat, did = chat_with_an_endless_child(cli, model_server, write_config, "It was stopped.")

    stopped = offload("stop", did[len("deleg_"):][:8])  # a unique prefix, from another process
    assert stopped.returncode == 0, stopped
    assert f"stopped {did}; its partial result goes to session" in stopped.stdout
    chat.wait_for(r"■ endless \(interrupted")
    chat.wait_for(r"agent> It was stopped\.")
    again = offload("stop", did)
    assert again.returncode == 2 and f"{did} is not running (it is " in again.stderr, again
    unknown = offload("stop", "deleg_nope")
    assert unknown.returncode == 2 and "no delegation 'deleg_nope'" in unknown.stderr, unknown
    chat.send("/quit")
    assert chat.finish() == 0


def test_agents_shows_a_finished_child_as_done_not_idle(cli, model_server, write_config, runtime):
    from offload.testing.demo_script import subagent_goal

    def child(request):
        if subagent_goal(request) == "quick":
            return text_reply("quick done")
        return hang_reply("slow…")

    server = model_server(scripted_parent(child=child, delegate={"tasks": [{"goal": "quick"}, {"goal": "slow"}]},
                                          on_result=text_reply("Noted.")))
    write_config(server)
    chat, did = delegating_chat(cli)
    wait_for_recorded_child(runtime, did)
    mark = chat.mark()
    chat.send("/agents")
    chat.wait_for(rf"{did}\s+running\s+children done 1/2", start=mark)
    line = chat.wait_for(r"#1  (.*)quick", start=mark).group(1)
    assert line.startswith("✓ completed") and "idle" not in line  # no idle clock for a finished child
    chat.wait_for(r"#2  … running   api calls .* idle .* slow", start=mark)
    chat.send("/stop")
    chat.wait_for(r"agent> Noted\.")
    chat.send("/quit")
    assert chat.finish() == 0


def wait_for_recorded_child(runtime, delegation_id: str, timeout_s: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = runtime.deliveries.get(delegation_id) or {}
        if (row.get("result") or {}).get("results"):
            return
        time.sleep(0.05)
    pytest.fail(f"{delegation_id} recorded no finished child within {timeout_s} s")
