"""Closing a client hands its work over (issue 44, point 4), through ``offload run`` and ``offload
worker`` on a SQLite home, against the scripted model server.

- SIGTERM of ``offload run`` while its child's side-effecting command runs: the command finishes
  and its result is recorded (the safe point), the unit is handed to the home's background
  worker, which continues the child from there; the result is in ``offload inbox`` later and
  ``run --resume`` delivers it; the command ran once.
- ``offload worker`` on SQLite resumes a dead owner's unit with no client running, and exits by
  itself once idle (``--idle-exit-s``); a second worker on the home leaves at once.
Resuming is opted into explicitly (``delegation.resume: auto``) whatever the default is.
"""
from __future__ import annotations

import signal
import threading
import time

import pytest
import yaml

from offload.owner import home_worker
from offload.testing.demo_script import request_role
from offload.testing.model_server import hang_reply, last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, delegating_chat, scripted_parent, until

# The per-home worker is the single-host ledger's; on PostgreSQL any host's `offload worker` takes
# a handed-over unit (tests/ledger/test_contract_hand_over.py holds that backend to the same fence).
pytestmark = [pytest.mark.e2e, pytest.mark.sqlite_only, pytest.mark.timeout(120)]
MARKER = "echo ran >> marker.txt && sleep 0.3"  # a command that outlives the SIGTERM a little


@pytest.fixture(autouse=True)
def stop_the_background_worker(_isolated_hermes_home):
    yield
    home_worker.kill(_isolated_hermes_home)


def _child_requests(server) -> list[dict]:
    return [r for r in server.requests if request_role(r) == "subagent"]


def marking_parent(gone: threading.Event):
    """A parent delegating "mark once": its child runs the marker command, then its next model
    call waits for ``gone`` (in flight while the run leaves) and ends the child."""
    def child(request):
        if any(m.get("role") == "tool" for m in request.get("messages") or []):
            gone.wait(60)
            return text_reply("Marked it once. Done.")
        return tool_call_reply("run_command", {"command": MARKER, "timeout_s": 60})
    return scripted_parent(child=child, delegate={"goal": "mark once"},
                           on_result=text_reply("The handed-over child is done."))


def sigterm_mid_command(cli, workspace):
    """``offload run`` of ``marking_parent``, SIGTERMed while its child's marker command runs:
    the run, the unit's id, the session's id and the marker file."""
    marker = workspace / "marker.txt"
    run = cli("run", "do the marked thing")
    did = run.wait_for(HANDLE_RE).group(1)
    sid = run.wait_for(SESSION_RE).group(1)
    until(marker.exists, "the child's command started")
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=10) == -signal.SIGTERM
    return run, did, sid, marker


def test_sigterm_of_run_mid_command_hands_the_child_over_and_the_result_is_in_the_inbox(
        cli, model_server, write_config, runtime, workspace, _isolated_hermes_home):
    gone = threading.Event()
    server = model_server(marking_parent(gone))
    write_config(server, resume="auto")
    run, did, sid, marker = sigterm_mid_command(cli, workspace)
    gone.set()
    row = until(lambda: (r := runtime.ledger().get(did)) is not None and r.state == "completed" and r,
                "the background worker finished the handed-over child")
    entry = row.result["results"][0]
    assert entry["status"] == "completed" and entry["summary"] == "Marked it once. Done.", row.result
    resumed = entry["resumed"]
    assert resumed["after"]["handed_over"] is True and resumed["after"]["pid"] == run.proc.pid
    assert resumed["unknown_calls"] == [] and resumed["calls_rerun"] == 0  # its result was recorded before
    assert marker.read_text().splitlines() == ["ran"]  # executed exactly once
    assert len(_child_requests(server)) == 3  # the call in flight when it left, issued once more
    assert row.delivery_state == "pending"  # the worker delivers nothing: it waits for the session
    inbox = cli("inbox")
    assert inbox.finish() == 0 and did in inbox.output, inbox.output
    again = cli("run", "--resume", sid)
    assert again.finish(timeout_s=60) == 0, again.output
    assert "The handed-over child is done." in again.output
    assert runtime.ledger().get(did).delivery_state == "delivered"


def test_the_worker_resumes_a_dead_owner_s_unit_on_sqlite_and_exits_when_idle(cli, model_server, write_config,
                                                                              runtime):
    resumed = threading.Event()

    def child(request):
        if len(_child_requests(server)) == 1:
            return hang_reply("thinking")  # in flight when the owner dies
        resumed.wait(60)  # the worker is busy with it until the test has looked
        return text_reply("Answered by the worker.")

    server = model_server(scripted_parent(child=child, delegate={"goal": "answer"}))
    write_config(server, resume="auto")
    run = cli("run", "ask something")
    did = run.wait_for(HANDLE_RE).group(1)
    until(lambda: _child_requests(server), "the child's model call started")
    run.kill()  # SIGKILL: nothing is handed over, the unit's owner is simply dead
    worker = cli("worker", "--idle-exit-s", "1")
    until(lambda: len(_child_requests(server)) == 2, "the worker resumed the child")
    second = cli("worker")
    assert second.finish() == 0 and "another worker" in second.output, second.output
    resumed.set()
    assert worker.finish(timeout_s=60) == 0, worker.output  # idle after the unit: it leaves by itself
    assert "idle, exiting" in worker.output and f"finished {did} completed" in worker.output, worker.output
    row = runtime.ledger().get(did)
    assert row.state == "completed" and row.result["results"][0]["summary"] == "Answered by the worker."
    assert row.result["results"][0]["resumed"]["after"]["pid"] == run.proc.pid
    assert len(_child_requests(server)) == 2  # the call in flight at the death, issued once more


def test_a_worker_that_cannot_run_a_unit_says_why_and_still_exits_when_idle(cli, model_server, write_config,
                                                                            runtime, _isolated_hermes_home):
    """A unit whose model the worker has no credentials for (here: the config lost its
    base_url, so the default endpoint needs a key nobody set) stays queued for a process that
    can run it; the worker says why once and leaves when idle (it ran forever, trying every
    second, while the unit counted as work it could start)."""
    server = model_server(scripted_parent(child=lambda request: hang_reply("thinking"), delegate={"goal": "answer"}))
    write_config(server, resume="auto")
    run = cli("run", "ask something")
    did = run.wait_for(HANDLE_RE).group(1)
    until(lambda: _child_requests(server), "the child's model call started")
    run.kill()
    (_isolated_hermes_home / "config.yaml").write_text(yaml.safe_dump({"model": "demo-model"}), encoding="utf-8")
    worker = cli("worker", "--idle-exit-s", "1")
    assert worker.finish(timeout_s=60) == 0, worker.output
    assert f"cannot start {did} (ConfigError: no API key" in worker.output, worker.output
    assert worker.output.count(f"cannot start {did}") == 1 and "idle, exiting" in worker.output, worker.output
    assert runtime.ledger().get(did).state == "queued"  # left for the next process that can run it


def test_the_sqlite_worker_takes_queued_units_within_its_capacity(cli, model_server, write_config, runtime):
    """Two units of a dead owner, a worker with ``-c 1``: it takes them one at a time from the
    queue (never two children's calls in flight at once) and finishes both."""
    in_flight, most = [0], [0]
    lock = threading.Lock()

    def child(request):
        if len(_child_requests(server)) <= 2:
            return hang_reply("thinking")  # both units' first calls, in flight when the owner dies
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.5)  # long enough for a second unit's call to overlap, were it started
        with lock:
            in_flight[0] -= 1
        return text_reply(f"done: {last_message_text(request)[:30]}")

    server = model_server(scripted_parent(child=child, delegate={"tasks": [{"goal": "first"}, {"goal": "second"}]}))
    write_config(server, resume="auto", independent_completions=True)
    run = cli("run", "two things")
    run.wait_for(r"delegated 2 task\(s\) in the background, reporting in 2 parts")
    until(lambda: len(_child_requests(server)) >= 2, "both units' children called the model")
    run.kill()
    worker = cli("worker", "-c", "1", "--idle-exit-s", "1")
    assert worker.finish(timeout_s=60) == 0, worker.output
    rows = [r for r in runtime.ledger().pending_rows()]
    assert len(rows) == 2 and all(r.state == "completed" for r in rows), rows
    assert most[0] == 1 and len(_child_requests(server)) == 4, (most, len(_child_requests(server)))


def _chat_child_in_flight(cli, model_server, write_config, answer: str, parent_reply: str):
    """``offload chat`` whose child's first model call hangs (until ``hold`` is set) and whose
    next one answers ``answer``: the hold, the server, the chat, the delegation and session ids,
    once that first call is in flight."""
    hold = threading.Event()

    def child(request):
        if len(_child_requests(server)) == 1:
            hold.wait(60)  # in flight when the chat goes
            return text_reply("too late")
        return text_reply(answer)

    server = model_server(scripted_parent(child=child, delegate={"goal": "answer"},
                                          on_result=text_reply(parent_reply)))
    write_config(server, resume="auto")
    chat, did = delegating_chat(cli)
    sid = chat.wait_for(SESSION_RE).group(1)
    until(lambda: _child_requests(server), "the child's model call started")
    return hold, server, chat, did, sid


def test_sighup_of_chat_hands_the_child_over_and_the_resumed_chat_gets_its_result(cli, model_server, write_config,
                                                                                   runtime):
    """A closed terminal (SIGHUP) while the chat's child thinks: the child's call is issued again
    by the home's worker, and ``chat --resume`` later delivers the result as a new turn."""
    hold, server, chat, did, sid = _chat_child_in_flight(cli, model_server, write_config, "Answered after the hang-up.",
                                                         "Got the answer after the hang-up.")
    chat.proc.send_signal(signal.SIGHUP)
    assert chat.proc.wait(timeout=10) == -signal.SIGHUP
    hold.set()
    row = until(lambda: (r := runtime.ledger().get(did)) is not None and r.state == "completed" and r,
                "the background worker finished the handed-over child")
    assert row.result["results"][0]["summary"] == "Answered after the hang-up."
    assert len(_child_requests(server)) == 2
    again = cli("chat", "--resume", sid)
    again.wait_for(r"agent> Got the answer after the hang-up.")
    again.send("/quit")
    assert again.finish() == 0, again.output
    assert runtime.ledger().get(did).delivery_state == "delivered"


def test_quitting_a_chat_after_new_hands_the_earlier_session_s_child_over(cli, model_server, write_config,
                                                                          runtime):
    """/quit waits only for the current session's results: a child of the session before /new
    still thinking is handed over as the chat leaves (not left to die with it), and the home's
    worker finishes it for that session's next visit."""
    hold, server, chat, did, first_session = _chat_child_in_flight(cli, model_server, write_config,
                                                                   "Answered after the chat left.", "Got it.")
    chat.send("/new")
    chat.wait_for(rf"session (?!{first_session})sess_[0-9a-f]+")
    chat.send("/quit")
    assert chat.finish() == 0, chat.output
    assert f"go on in this home's background worker: {did}" in chat.output
    hold.set()
    row = until(lambda: (r := runtime.ledger().get(did)) is not None and r.state == "completed" and r,
                "the background worker finished the handed-over child")
    assert row.result["results"][0]["summary"] == "Answered after the chat left."
    assert row.result["results"][0]["resumed"]["after"]["handed_over"] is True
    assert row.delivery_state == "pending" and len(_child_requests(server)) == 2


def test_sigterm_of_the_gateway_hands_the_child_over_and_the_restarted_gateway_delivers_it(
        cli, model_server, runtime, monkeypatch, _isolated_hermes_home, workspace):
    from offload.gateway.telegram.fake_api import FakeBotApi
    from tests.e2e.gateway_harness import DM, TOKEN, chat_parent, visible, write_gateway_config

    hold = threading.Event()

    def child(request):
        if len(_child_requests(server)) == 1:
            hold.wait(60)  # in flight when the gateway is told to stop
            return text_reply("too late")
        return text_reply("Answered while no gateway ran.")

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    server = model_server(chat_parent(lambda text: {"goal": "answer"}, child))
    with FakeBotApi(TOKEN) as api:
        write_gateway_config(_isolated_hermes_home, workspace, server, api, resume="auto")
        first = cli("gateway", "-v")
        first.wait_for(r"offload gateway: serving")
        api.user_says(DM, "go")
        until(lambda: _child_requests(server), "the child's model call started")
        [row] = runtime.ledger().running_rows()
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(timeout=15) == 0, first.output
        hold.set()
        done = until(lambda: (r := runtime.ledger().get(row.delegation_id)).state == "completed" and r,
                     "the background worker finished the handed-over child")
        assert done.result["results"][0]["resumed"]["after"]["handed_over"] is True
        second = cli("gateway", "-v")
        second.wait_for(r"offload gateway: serving")
        assert api.wait_until(lambda: "Result noted." in "\n".join(visible(m) for m in api.messages(DM)), 60), \
            second.output
        until(lambda: runtime.ledger().get(row.delegation_id).delivery_state == "delivered", "the result delivered")
        assert "Answered while no gateway ran." in "\n".join(visible(m) for m in api.messages(DM))
        second.kill()  # before its Telegram API goes away
