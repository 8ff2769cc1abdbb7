"""``offload gateway`` end to end: a subprocess against the loopback fake Bot API and the
scripted model server. Every wait is on an observable event (a message the fake received, a
ledger row), never a fixed sleep."""
from __future__ import annotations

import signal
import subprocess

import pytest
import yaml

from offload.gateway.telegram.fake_api import FakeBotApi
from offload.testing.demo_script import subagent_goal
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.gateway_harness import (DM, GROUP, TOKEN, TOPIC, chat_parent, echo_goal,
                                       result_headers, shown, visible, write_gateway_config)
from offload.home import config_path
from offload.ledger.queries import pending_rows, running_rows
from tools.async_delegation_delivery import current_ledger

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def api():
    with FakeBotApi(TOKEN) as fake:
        yield fake


@pytest.fixture
def start_gateway(cli, monkeypatch):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)

    def start():
        proc = cli("gateway", "-v")
        proc.wait_for(r"offload gateway: serving 2 allowed Telegram chat")
        return proc
    return start


@pytest.fixture
def configure(_isolated_hermes_home, workspace, model_server, api):
    def write(script, gateway=None, top=None, **delegation):
        server = model_server(script)
        write_gateway_config(_isolated_hermes_home, workspace, server, api, gateway, top, **delegation)
        return server
    return write


def say_in_both_chats(api: FakeBotApi) -> None:
    api.user_says(DM, "alpha")
    api.user_says(GROUP, "beta", chat_type="supergroup", thread_id=TOPIC)


def wait_shown(api: FakeBotApi, chat_id: int, needle: str, thread_id: int | None = None, timeout_s: float = 60):
    assert api.wait_until(lambda: needle in shown(api, chat_id, thread_id), timeout_s), \
        f"{needle!r} never reached chat {chat_id}; it shows:\n{shown(api, chat_id, thread_id)}"


def stop(proc) -> None:
    """SIGTERM: the gateway must stop promptly and cleanly even with subagents still running."""
    proc.proc.send_signal(signal.SIGTERM)
    try:
        code = proc.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the gateway ignored SIGTERM for 30 s; output:\n{proc.output}")
    assert code == 0, proc.output


def test_a_dm_and_a_group_topic_each_get_only_their_own_results(api, configure, start_gateway):
    configure(chat_parent(lambda text: {"goal": f"{text}-job"}, echo_goal))
    gateway = start_gateway()
    say_in_both_chats(api)
    wait_shown(api, DM, "result of alpha-job")
    wait_shown(api, GROUP, "result of beta-job", TOPIC)
    wait_shown(api, DM, "Result noted.")
    wait_shown(api, GROUP, "Result noted.", TOPIC)
    assert "beta" not in shown(api, DM)
    assert "alpha" not in shown(api, GROUP)
    assert all(m.thread_id == str(TOPIC) for m in api.messages(GROUP))  # never the group's main thread
    assert len(result_headers(api, DM)) == len(result_headers(api, GROUP)) == 1
    stop(gateway)
    assert TOKEN not in gateway.output  # -v logs every delivery, never the token


def test_unknown_chats_get_one_refusal_and_nothing_runs(api, configure, start_gateway):
    server = configure(chat_parent(lambda text: {"goal": text}, echo_goal))
    gateway = start_gateway()
    api.user_says(999, "let me in")
    api.user_says(999, "please")
    api.user_says(DM, "alpha")
    wait_shown(api, DM, "result of alpha")
    [refusal] = [visible(m) for m in api.messages(999)]
    assert "does not serve this chat. Its chat id is 999" in refusal
    assert str(DM) not in refusal and str(GROUP) not in refusal  # a stranger never learns who is served
    assert not any("let me in" in str(r["messages"]) for r in server.requests)
    stop(gateway)


def fan_out(text: str) -> dict:
    return {"tasks": [{"goal": f"{text}-fast"}, {"goal": f"{text}-slow"}]}


def rows_with_a_finished_child(runtime) -> list:
    return [r for r in running_rows(runtime.ledger()) if len((r.result or {}).get("results") or []) >= 1]


def slow_hangs_once(calls: dict[str, int]):
    """Children counting their model calls in ``calls`` by goal: a ``-slow`` child's first call
    hangs (its owner is killed during it); asked again by the process that resumes it, it answers."""
    def child(request):
        goal = subagent_goal(request)
        calls[goal] = calls.get(goal, 0) + 1
        if goal.endswith("-slow") and calls[goal] == 1:
            return hang_reply("working…")
        return text_reply(f"result of {goal}")
    return child


def test_sigkill_mid_fan_out_then_restart_resumes_the_slow_child_and_delivers_to_the_right_chats_once(
        api, configure, start_gateway, runtime):
    calls: dict[str, int] = {}
    configure(chat_parent(fan_out, slow_hangs_once(calls)), resume="auto")
    first = start_gateway()
    say_in_both_chats(api)
    assert api.wait_until(lambda: len(rows_with_a_finished_child(runtime)) == 2, 60), first.output
    first.kill()  # SIGKILL: each fan-out has one child recorded, one still running
    assert result_headers(api) == []

    second = start_gateway()  # resumes both units: the fast children are kept, the slow ones asked again
    wait_shown(api, DM, "result of alpha-slow")
    wait_shown(api, GROUP, "result of beta-slow", TOPIC)
    wait_shown(api, DM, "Result noted.")
    wait_shown(api, GROUP, "Result noted.", TOPIC)
    stop(second)
    assert "result of alpha-fast" in shown(api, DM) and "result of beta-fast" in shown(api, GROUP, TOPIC)
    assert "beta" not in shown(api, DM) and "alpha" not in shown(api, GROUP)
    assert len(result_headers(api, DM)) == len(result_headers(api, GROUP)) == 1
    assert all(h.endswith("(completed)") for h in result_headers(api))  # resumed: no fate left unknown
    assert sorted(calls.items()) == [
        ("alpha-fast", 1), ("alpha-slow", 2), ("beta-fast", 1), ("beta-slow", 2)]  # only the cut call again
    assert pending_rows(runtime.ledger()) == []


def test_a_ten_thousand_character_result_arrives_whole_in_several_messages(api, configure, start_gateway):
    lines = [f"line {n:03d} <b>&amp;</b> " + "x" * 80 for n in range(105)]  # ~10,500 characters
    configure(chat_parent(lambda text: {"goal": "long report"}, lambda r: text_reply("\n".join(lines))))
    gateway = start_gateway()
    api.user_says(DM, "report")
    wait_shown(api, DM, "Result noted.")
    text = shown(api, DM)
    assert all(line in text for line in lines)  # every line whole, hostile markup shown literally
    assert len(result_headers(api, DM)) == 1 and len(api.messages(DM)) >= 4  # notice, 3+ parts, answer
    stop(gateway)


def test_slash_stop_in_one_chat_leaves_the_other_chat_running(api, configure, start_gateway, runtime):
    server = configure(chat_parent(lambda text: {"goal": f"{text}-endless"}, lambda r: hang_reply("working…")))
    gateway = start_gateway()
    say_in_both_chats(api)
    assert api.wait_until(lambda: len(running_rows(runtime.ledger())) == 2, 60)
    assert server.wait_for_requests(6, timeout_s=60)  # per chat: parent x2 and the child, now hanging
    api.user_says(DM, "/stop")
    wait_shown(api, DM, "stopping 1 background delegation")
    wait_shown(api, DM, "status=interrupted")
    [still] = running_rows(runtime.ledger())
    assert "beta-endless" in str(still.task)
    assert result_headers(api, GROUP) == []
    stop(gateway)


def test_offload_stop_from_another_process_reaches_a_unit_the_gateway_runs(api, configure, start_gateway, runtime):
    from tests.e2e.conftest import offload

    configure(chat_parent(lambda text: {"goal": f"{text}-endless"}, lambda r: hang_reply("working…")))
    gateway = start_gateway()
    api.user_says(DM, "alpha")
    assert api.wait_until(lambda: len(running_rows(runtime.ledger())) == 1, 60), gateway.output
    [row] = running_rows(runtime.ledger())
    stopped = offload("stop", row.delegation_id)  # another process: only the ledger connects them
    assert stopped.returncode == 0, stopped
    assert f"stopped {row.delegation_id}" in stopped.stdout
    wait_shown(api, DM, "status=interrupted")
    assert runtime.deliveries.get(row.delegation_id)["state"] != "running"
    stop(gateway)


def test_two_gateways_on_one_ledger_never_send_one_result_twice(api, configure, start_gateway, runtime):
    # The first gateway's user turns never end, so its results stay pending in the ledger.
    configure(chat_parent(fan_out, echo_goal, after_tool=hang_reply("Started; ")),
              independent_completions=True)
    first = start_gateway()
    say_in_both_chats(api)
    assert api.wait_until(lambda: len(pending_rows(runtime.ledger())) == 4, 60), first.output
    first.kill()
    ids = {r.delegation_id for r in pending_rows(runtime.ledger())}

    api.hold("sendMessage")  # whoever claims a result is stuck showing it while the other restores
    second, third = start_gateway(), start_gateway()
    for gateway in (second, third):
        gateway.wait_for(r"restored \d+ undelivered result")
    assert api.wait_until(lambda: api.calls.count("sendMessage") >= 1, 30)
    # Every result is claimed by one of them; the other either restored it too and was refused
    # its claim, or restored after the claim and was not offered it (a live claim's holder delivers).
    claimed = lambda: all(current_ledger().get(i).delivery_claim for i in ids)  # noqa: E731
    assert api.wait_until(claimed, 30), second.output + third.output
    api.release("sendMessage")
    assert api.wait_until(lambda: all(runtime.deliveries.get(i)["delivery_state"] == "delivered" for i in ids), 60)
    stop(second)
    stop(third)
    headers = result_headers(api)
    assert sorted(h.split()[2] for h in headers) == sorted(ids)  # each result exactly once, across both
    assert "beta" not in shown(api, DM) and "alpha" not in shown(api, GROUP)


def test_a_blocked_bot_drops_the_result_with_a_reason_inbox_shows(api, configure, start_gateway, cli, runtime):
    configure(chat_parent(lambda text: {"goal": "for nobody"}, echo_goal))
    gateway = start_gateway()
    api.block(DM)  # the user blocked the bot right after writing
    api.user_says(DM, "alpha")
    assert api.wait_until(lambda: [r for r in settled(runtime) if r.delivery_state == "dropped"], 60), gateway.output
    [row] = settled(runtime)
    inbox = cli("inbox", "--all")
    assert inbox.finish() == 0
    inbox.wait_for(rf"{row.delegation_id} .*dropped: chat {DM} cannot be reached: "
                   "403 Forbidden: bot was blocked by the user")
    assert row.drop_reason == f"chat {DM} cannot be reached: 403 Forbidden: bot was blocked by the user"
    assert api.messages(DM) == []
    stop(gateway)


def settled(runtime):
    from offload.ledger.queries import settled_rows
    return settled_rows(runtime.ledger(), 10)


def test_a_429_storm_and_5xx_delay_a_result_but_deliver_it_once(api, configure, start_gateway, runtime):
    configure(chat_parent(lambda text: {"goal": "busy api"}, echo_goal))
    is_result = lambda body: str(body.get("text", "")).startswith("<b>Background result")
    api.fail("sendMessage", 502, times=2, when=is_result)
    api.fail("sendMessage", 429, times=5, retry_after=1, when=is_result)  # outlasts one call's 4 attempts
    gateway = start_gateway()
    api.user_says(DM, "alpha")
    wait_shown(api, DM, "Result noted.")
    [header] = result_headers(api, DM)
    delegation_id = header.split()[2]
    assert api.calls.count("sendMessage") >= 8  # the failed attempts really happened
    row = runtime.deliveries.get(delegation_id)
    assert row["delivery_state"] == "delivered" and row["delivery_attempts"] == 2  # claimed, given back, claimed
    stop(gateway)


@pytest.mark.parametrize("policy", ["deliver", "drop"])
def test_slash_new_then_the_old_sessions_result_is_labelled_or_dropped(api, configure, start_gateway, policy, runtime):
    configure(chat_parent(lambda text: {"goal": "long job"}, lambda r: hang_reply("working…")),
              gateway={"on_new_session": policy})
    gateway = start_gateway()
    api.user_says(DM, "alpha")
    wait_shown(api, DM, "Started it in the background.")
    api.user_says(DM, "/new")
    wait_shown(api, DM, "New session")
    api.user_says(DM, "/stop")  # ends the old session's work: its partial result comes back now
    if policy == "deliver":
        wait_shown(api, DM, "from previous session sess_")
        wait_shown(api, DM, "Result noted.")
    else:
        assert api.wait_until(lambda: [r for r in settled(runtime) if r.delivery_state == "dropped"], 60)
        assert result_headers(api, DM) == []
    stop(gateway)


def test_slash_agents_shows_a_live_roster_edited_in_place_then_collapsed(api, configure, start_gateway, runtime):
    configure(chat_parent(lambda text: {"goal": "watch me"}, lambda r: hang_reply("working…")))
    gateway = start_gateway()
    api.user_says(DM, "alpha")
    assert api.wait_until(lambda: running_rows(runtime.ledger()), 60)
    api.user_says(DM, "/agents")
    wait_shown(api, DM, "watch me")
    [bubble] = [m for m in api.messages(DM) if m.text.startswith("<b>Background agents")]
    assert "running" in bubble.text
    api.user_says(DM, "/stop")
    assert api.wait_until(lambda: any("finished" in e for e in bubble.edits), 60), bubble.edits
    assert len([m for m in api.messages(DM) if m.text.startswith("<b>Background agents")]) == 1  # one bubble
    stop(gateway)


@pytest.mark.parametrize("gateway_cfg, token, expected", [
    ({}, "", r"no Telegram bot token: export TELEGRAM_BOT_TOKEN="),
    ({"telegram": {"base_url": "api.telegram.org"}}, TOKEN, r"gateway.telegram.base_url.*http"),
])
def test_a_gateway_that_cannot_serve_says_which_key_to_fix(
        api, configure, cli, monkeypatch, gateway_cfg, token, expected):
    configure(chat_parent(lambda text: {"goal": text}, echo_goal))
    data = yaml.safe_load(config_path().read_text())
    data["gateway"]["telegram"].update(gateway_cfg.get("telegram", {}))
    config_path().write_text(yaml.safe_dump(data))
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", token)
    proc = cli("gateway")
    assert proc.finish() == 2
    proc.wait_for(expected)
    assert "Traceback" not in proc.output and (not token or token not in proc.output)


def test_a_revoked_token_stops_the_gateway_with_the_fix(api, configure, cli, monkeypatch):
    configure(chat_parent(lambda text: {"goal": text}, echo_goal))
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "999:revoked")
    proc = cli("gateway")
    assert proc.finish() == 2
    proc.wait_for(r"Telegram rejected the bot token \(401\).*@BotFather")
    assert "999:revoked" not in proc.output


def test_a_result_whose_turn_hit_an_endpoint_outage_stays_pending_then_is_delivered_once(
        api, configure, start_gateway, runtime):
    import threading

    from offload.testing.demo_script import request_role
    from offload.testing.model_server import error_reply, last_message_text

    down = threading.Event()
    turns_with_the_result: list[bool] = []  # per parent request carrying the result: was it down?
    parent = chat_parent(lambda text: {"goal": f"{text}-job"}, echo_goal, on_result=text_reply("Result noted."))

    def script(request):
        if request_role(request) == "parent" and last_message_text(request).startswith("[ASYNC DELEGATION"):
            turns_with_the_result.append(down.is_set())
            if down.is_set():  # the model endpoint is down: 503 on every retry of the turn
                return error_reply(503, "upstream unavailable", retry_after_s=0.01)
        if request_role(request) == "subagent":
            down.set()  # the endpoint goes down while the child runs, before its result's turn
        return parent(request)

    configure(script)
    gateway = start_gateway()
    api.user_says(DM, "alpha")
    assert api.wait_until(lambda: turns_with_the_result.count(True) >= 10, 60), gateway.output  # 2+ failed turns
    [row] = pending_rows(runtime.ledger())
    did = row.delegation_id
    kept = runtime.deliveries.get(did)
    assert kept["delivery_state"] == "pending" and kept["delivery_attempts"] == 0, kept  # no attempt spent
    assert "Result noted." not in shown(api, DM)

    down.clear()  # the endpoint is back
    wait_shown(api, DM, "Result noted.")
    assert api.wait_until(lambda: runtime.deliveries.get(did)["delivery_state"] == "delivered", 30)
    stop(gateway)
    assert turns_with_the_result.count(False) == 1  # the turn that took it ran once
    assert len(result_headers(api, DM)) == 1  # shown to the user once, not once per failed turn
    assert shown(api, DM).count("result of alpha-job") == 1
