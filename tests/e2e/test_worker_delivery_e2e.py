"""Worker-run units reach their session through every consumer (issue 27): ``offload run``,
``offload chat``, ``offload gateway`` and a Python program, each with ``delegation.run_on:
workers`` on the test PostgreSQL server and a real ``offload worker`` subprocess on the same
host -- the case where the worker, a live process on this host, owns the finished row and
never delivers it. Every wait is on an observable line, message or row, never a sleep."""
from __future__ import annotations

import os
import signal
import time

import pytest
import yaml

from offload.gateway.telegram.fake_api import FakeBotApi
from offload.testing.demo_script import request_role
from offload.testing.model_server import text_reply
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, parent_requests_with_results, scripted_parent
from tests.e2e.gateway_harness import DM, TOKEN, chat_parent, echo_goal, shown, write_gateway_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
WORKER_UP = r"offload worker on \S+ \(pid (\d+)\)"


@pytest.fixture
def on_workers(_isolated_hermes_home, shared_ledger):
    """Rewrite config.yaml (written by a harness) to queue background work for the workers."""
    def apply() -> None:
        path = _isolated_hermes_home / "config.yaml"
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data.setdefault("delegation", {})["run_on"] = "workers"
        data["ledger"] = {"url": shared_ledger}
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return apply


@pytest.fixture
def worker(cli):
    def start():
        proc = cli("worker", "-c", "2")
        return proc, proc.wait_for(WORKER_UP).group(1)
    return start


@pytest.fixture
def run_on_worker(cli, model_server, write_config, on_workers, worker):
    """``offload run PROMPT`` whose one delegated goal a real worker runs with ``child``; the
    model server, the run, the unit's id and the worker (process, pid)."""
    def start(prompt: str, child, answer: str):
        server = model_server(scripted_parent(child=child, delegate={"goal": prompt},
                                              on_result=text_reply(answer)))
        write_config(server)
        on_workers()
        worker_proc, worker_pid = worker()
        run = cli("run", prompt)
        return server, run, run.wait_for(HANDLE_RE).group(1), worker_proc, worker_pid
    return start


def delivered(did: str) -> str:
    from tools.async_delegation import get_durable_delegation

    return (get_durable_delegation(did) or {}).get("delivery_state", "")


def test_offload_run_waits_for_the_workers_result_and_delivers_it(run_on_worker):
    server, run, did, _, worker_pid = run_on_worker("count the files", lambda r: text_reply("42 files"),
                                                    "The worker counted 42 files.")
    run.wait_for(r"waiting for 1 background result")
    run.wait_for(rf"{did}: (queued for an `offload worker`|running in process {worker_pid})")
    # a result the worker settled while run waited is news from another process, not a replay
    run.wait_for(rf"background result {did} landed \(from another process\)")
    run.wait_for(r"agent> The worker counted 42 files\.")
    assert run.finish() == 0
    assert "42 files" in parent_requests_with_results(server)[0]["messages"][-1]["content"]
    assert delivered(did) == "delivered"


def test_ctrl_c_in_offload_run_stops_the_unit_a_worker_runs_and_delivers_its_partial_result(run_on_worker):
    from offload.testing.model_server import hang_reply

    _, run, did, worker_proc, _ = run_on_worker("count forever", lambda r: hang_reply("still counting…"),
                                                "The worker's unit was stopped.")
    worker_proc.wait_for(rf"started {did}")
    run.proc.send_signal(signal.SIGINT)  # Ctrl-C: stop the session's background work, wherever it runs
    run.wait_for(r"stopping 1 background delegation")
    run.wait_for(rf"background result {did} landed")
    run.wait_for(r"agent> The worker's unit was stopped\.")
    assert run.finish() == 130
    from tools.async_delegation import get_durable_delegation

    row = get_durable_delegation(did)
    assert row["delivery_state"] == "delivered"
    assert [child["status"] for child in row["result"]["results"]] == ["interrupted"]  # stopped on the worker


def test_offload_chat_delivers_a_workers_result_as_a_new_turn(cli, model_server, write_config, on_workers, worker):
    server = model_server(scripted_parent(child=lambda r: text_reply("7 modules"), delegate={"goal": "list modules"},
                                          on_result=text_reply("Noted: the worker found 7 modules.")))
    write_config(server)
    on_workers()
    worker()
    chat = cli("chat")
    sid = chat.wait_for(SESSION_RE).group(1)
    chat.send("list the modules")
    did = chat.wait_for(HANDLE_RE).group(1)
    chat.wait_for(rf"background result {did} landed")
    chat.wait_for(r"agent> Noted: the worker found 7 modules\.")
    chat.send("/quit")
    assert chat.finish() == 0
    from offload.agent.session_store import SessionStore

    with SessionStore() as store:
        assert store.was_injected(sid, did)
    assert delivered(did) == "delivered"


def test_offload_gateway_delivers_a_workers_result_to_its_chat(cli, model_server, _isolated_hermes_home, workspace,
                                                               on_workers, worker, monkeypatch):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    with FakeBotApi(TOKEN) as api:
        server = model_server(chat_parent(lambda text: {"goal": f"work on {text}"}, echo_goal,
                                          on_result=text_reply("Gateway noted the worker's result.")))
        write_gateway_config(_isolated_hermes_home, workspace, server, api)
        on_workers()
        worker()
        gateway = cli("gateway", "-v")
        gateway.wait_for(r"offload gateway: serving 2 allowed Telegram chat")
        api.user_says(DM, "alpha")
        assert api.wait_until(lambda: "result of work on alpha" in shown(api, DM), 60), shown(api, DM)
        assert api.wait_until(lambda: "Gateway noted the worker's result." in shown(api, DM), 60), shown(api, DM)


def test_a_python_consumer_on_the_workers_host_delivers_its_result(cli, model_server, write_config, on_workers,
                                                                    worker):
    """The library surface: a program draining the completion bus for its session, claiming
    and acknowledging each result, on the host where the worker runs."""
    from offload.ledger import DispatchRow
    from offload.origin import Origin
    from offload.subagents.queue import unit_spec
    from tools import async_delegation_delivery as delivery
    from tools.process_registry import CompletionBus
    import tools.delegate_tool as dt
    from offload.subagents.config import DelegationConfig

    session = "sess_library_consumer"
    write_config(model_server(lambda r: text_reply("library answer")))
    on_workers()
    _, worker_pid = worker()
    bus = CompletionBus()  # this program's own bus
    bus.restore_completions()  # its consumer starts listening
    unit = dt.Batch(tasks=[dt.TaskArgs(goal="summarize")], children=[], parent=None, cfg=DelegationConfig(),
                    creds={"model": "demo-model"}, indexes=[0])
    did = "deleg_library0001"
    origin = Origin.capture(session, session)
    delivery.current_ledger().enqueue_unit(DispatchRow.of(did, origin, time.time(), unit_spec(unit, origin)), time.time())
    deadline = time.monotonic() + 60
    got = []
    while not got:
        assert time.monotonic() < deadline, f"the result of {did} never reached this program: {delivered(did)!r}"
        for evt, text in bus.drain_notifications(session_key=session):
            claim = delivery.claim_event_delivery(evt, "library")
            assert claim and delivery.complete_event_delivery(evt, claim)
            got.append((evt, text))
        time.sleep(0.05)  # polling the bus, as a program's loop does
    [(evt, text)] = got
    assert evt["delegation_id"] == did and evt["status"] == "completed" and "library answer" in text
    row = delivery.current_ledger().get(did)
    assert row.delivery_state == "delivered" and row.owner_pid == int(worker_pid)
    assert row.owner_pid != os.getpid()


def test_a_unit_a_worker_on_another_host_runs_is_capped_and_counted_against_the_day(
        cli, model_server, write_config, on_workers, _isolated_hermes_home, tmp_path, workspace):
    """The budget travels in the queued row: a worker with its own home (another host, sharing
    only the ledger) caps the unit -- the child stops with its partial result and the notice --
    and counts its tokens in the shared ledger, so the dispatcher's next call is refused by the
    day's cap."""
    from offload.testing.model_server import tool_call_reply
    from tests.e2e.conftest import Cli
    from tools import async_delegation_delivery as delivery
    from tools.async_delegation import get_durable_delegation

    def child(request):  # would work forever: one more command after each result
        return tool_call_reply("run_command", {"command": "echo step"}, text="Found part one.")
    server = model_server(scripted_parent(child=child, delegate={"goal": "count the words"},
                                          on_result=text_reply("The budget stopped it.")))
    write_config(server, max_tokens_per_delegation=50, max_tokens_per_day=1)
    on_workers()
    other_host = tmp_path / "worker-home"
    other_host.mkdir()
    (other_host / "config.yaml").write_text((_isolated_hermes_home / "config.yaml").read_text(encoding="utf-8"),
                                            encoding="utf-8")
    worker_proc = Cli(("worker", "-c", "2"), other_host, workspace)
    try:
        worker_proc.wait_for(WORKER_UP)
        run = cli("run", "count the words")
        did = run.wait_for(HANDLE_RE).group(1)
        worker_proc.wait_for(rf"started {did}")
        run.wait_for(rf"background result {did} landed")
        run.wait_for(r"agent> The budget stopped it\.")
        run.finish()
        [entry] = get_durable_delegation(did)["result"]["results"]
        assert (entry["status"], entry["exit_reason"], entry["summary"]) == (
            "interrupted", "token_budget", "Found part one.")
        assert "delegation.max_tokens_per_delegation=50" in entry["error"]
        assert len([r for r in server.requests if request_role(r) == "subagent"]) == 1  # no call after the budget
        injected = parent_requests_with_results(server)[0]["messages"][-1]["content"]
        assert "stopped at its token budget" in injected, injected
        session = delivery.current_ledger().get(did).parent_session_id
        [(tokens, _, _)] = delivery.current_ledger().spend_totals([("session_key", session)])
        assert session.startswith("sess_") and tokens == entry["tokens"]["input"] + entry["tokens"]["output"] > 0
        again = cli("run", "count more words")
        again.wait_for(r"agent> Started it")
        assert again.finish() == 0
        refused = [r for r in server.requests if request_role(r) == "parent" and r["messages"][-1]["role"] == "tool"][-1]
        assert f"subagents have used {tokens} tokens today" in refused["messages"][-1]["content"]
        assert "delegation.max_tokens_per_day=1" in refused["messages"][-1]["content"]
    finally:
        worker_proc.kill()
