"""``offload gateway`` on Matrix end to end: a subprocess against a REAL Synapse (``.ci/synapse-up``)
and the scripted model server, with a second Matrix user as a plain client (httpx against the
client-server API) in the room. Waits poll the homeserver (it has no push to a test) with a
deadline; there are no fixed sleeps."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from offload.ledger.queries import pending_rows, running_rows
from offload.testing.demo_script import last_role
from offload.testing.model_server import hang_reply, last_message_text, text_reply, tool_call_reply
from tests.e2e.gateway_harness import RESULT_HEADER, chat_parent, echo_goal
from tests.e2e.test_gateway_e2e import fan_out, slow_hangs_once, stop
from tests.matrix_support import MatrixUser, OwnSynapse, register, synapse_server, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def synapse():
    return synapse_server()


@pytest.fixture
def people(synapse):
    """The bot's account, its owner (allowed), a stranger and an admin, all fresh."""
    made = {role: register(synapse, role, admin=role == "admin") for role in ("bot", "alice", "mallory", "admin")}
    yield made
    for user in made.values():
        user.close()


@pytest.fixture
def configure(_isolated_hermes_home, workspace, model_server, synapse, people, monkeypatch):
    monkeypatch.setenv("MATRIX_ACCESS_TOKEN", people["bot"].token)

    def write(script, matrix: dict[str, Any] | None = None, url: str = "", **delegation):
        server = model_server(script)
        data = {"model": "demo-model", "base_url": server.url, "workspace": str(workspace),
                "toolsets": ["terminal", "file", "delegation"], "delegation": delegation,
                "gateway": {"matrix": {"homeserver": url or synapse.url, "user_id": people["bot"].user_id,
                                       "allowed_user_ids": [people["alice"].user_id], "poll_timeout_s": 1,
                                       "send_attempts": 6, **(matrix or {})},
                            "retry_backoff_s": 0.2, "roster_interval_s": 0.2}}
        (_isolated_hermes_home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
        return server
    return write


@pytest.fixture
def start_gateway(cli):
    def start():
        proc = cli("gateway", "-v")
        proc.wait_for(r"offload gateway: serving Matrix as @bot")
        return proc
    return start


def joined(user: MatrixUser, room_id: str, who: str) -> bool:
    state = user.request("GET", f"/_matrix/client/v3/rooms/{room_id}/joined_members")
    return who in (state.get("joined") or {})


def room_with_bot(people, **kwargs) -> str:
    """Alice's new room; the bot was invited by her and joined."""
    alice, bot = people["alice"], people["bot"]
    room = alice.create_room(invite=[bot.user_id], **kwargs)
    wait_until(lambda: joined(alice, room, bot.user_id), "the bot to accept alice's invitation")
    return room


def bot_text(people, room: str, thread: str | None = None) -> str:
    return people["alice"].text(room, people["bot"].user_id, thread)


def wait_said(people, room: str, needle: str, thread: str | None = None, timeout_s: float = 90,
              gateway=None) -> None:
    wait_until(lambda: needle in bot_text(people, room, thread),
               f"{needle!r} in room {room} (thread {thread!r}); the bot said:\n{bot_text(people, room, thread)}"
               + (f"\ngateway output:\n{gateway.output}" if gateway else ""), timeout_s)


def results(people, room: str, thread: str | None = None) -> list[dict]:
    return [m for m in people["alice"].messages(room, people["bot"].user_id, thread)
            if m["content"].get("body", "").startswith(RESULT_HEADER)]


def test_results_return_to_the_room_and_the_thread_that_asked_as_html_and_plain_text(
        configure, start_gateway, people):
    configure(chat_parent(lambda text: {"goal": f"{text} <b>&amp;</b>-job"}, echo_goal))
    gateway = start_gateway()
    room = room_with_bot(people)
    alice = people["alice"]
    alice.say(room, "alpha")
    root = alice.say(room, "a thread")
    alice.say(room, "beta", thread=root)
    wait_said(people, room, "result of alpha <b>&amp;</b>-job", thread="")
    wait_said(people, room, "result of beta <b>&amp;</b>-job", thread=root)
    wait_said(people, room, "Result noted.", thread=root)
    main = results(people, room, thread="")  # "alpha", and the thread's first message (it asked too)
    [threaded] = results(people, room, thread=root)
    assert len(main) == 2 and "beta" not in str(main) and "alpha" not in threaded["content"]["body"]
    content = threaded["content"]
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"].startswith("<b>Background result ")
    assert "&lt;b&gt;&amp;amp;&lt;/b&gt;" in content["formatted_body"]  # child text never renders as markup
    stop(gateway)
    assert people["bot"].token not in gateway.output  # -v logs every delivery, never the token


def test_strangers_get_one_refusal_naming_their_room_and_nothing_runs(configure, start_gateway, people):
    server = configure(chat_parent(lambda text: {"goal": text}, echo_goal))
    alice, mallory, bot = people["alice"], people["mallory"], people["bot"]
    strangers_room = mallory.create_room(invite=[bot.user_id])
    bot.join(strangers_room)  # joined behind the gateway's back: a room it does not serve
    declined = mallory.create_room(invite=[bot.user_id])
    gateway = start_gateway()
    wait_until(lambda: bot.user_id not in str(mallory.request(
        "GET", f"/_matrix/client/v3/rooms/{declined}/members", params={"membership": "invite"})),
        "the bot to decline mallory's invitation")
    assert not joined(mallory, declined, bot.user_id)
    mallory.say(strangers_room, "let me in")
    mallory.say(strangers_room, "please")
    room = room_with_bot(people)
    alice.invite(room, mallory.user_id)
    mallory.join(room)
    mallory.say(room, "run this for me")
    mallory.say(room, "and this")
    alice.say(room, "alpha")
    wait_said(people, room, "result of alpha")
    [refusal] = [m["content"]["body"] for m in mallory.messages(strangers_room, bot.user_id)]
    assert f"does not serve this chat. Its chat id is {strangers_room}" in refusal
    assert "gateway.matrix.allowed_room_ids" in refusal and room not in refusal
    [told] = [m["content"]["body"] for m in mallory.messages(room, bot.user_id) if mallory.user_id in
              m["content"]["body"]]
    assert "answers only the users its owner allowed" in told
    asked = str([r["messages"] for r in server.requests])
    assert "let me in" not in asked and "run this for me" not in asked and "and this" not in asked
    gateway.wait_for(rf"chat {strangers_room} wrote, but it is not allowed; to serve it run: offload config set "
                     "gateway.matrix.allowed_room_ids")
    stop(gateway)


def test_agents_roster_is_edited_in_place_then_stop_and_new(configure, start_gateway, people, runtime):
    configure(chat_parent(lambda text: {"goal": "watch me"}, lambda r: hang_reply("working…")))
    gateway = start_gateway()
    room = room_with_bot(people)
    alice = people["alice"]
    alice.say(room, "/help")
    wait_said(people, room, "/agents live roster")
    alice.say(room, "alpha")
    wait_until(lambda: running_rows(runtime.ledger()), "the delegation to run")
    alice.say(room, "/agents")
    wait_said(people, room, "watch me")
    alice.say(room, "/stop")
    wait_said(people, room, "stopping 1 background delegation")
    wait_said(people, room, "finished", timeout_s=60)
    bubbles = [m for m in alice.messages(room, people["bot"].user_id)
               if m["content"]["body"].startswith("Background agents")]
    assert len(bubbles) == 1 and bubbles[0]["edited"], bubbles  # one message, replaced in place (m.replace)
    wait_said(people, room, "status=interrupted")
    alice.say(room, "/new")
    wait_said(people, room, "New session")
    stop(gateway)


def cleaning_child(request):
    if last_role(request) == "tool":
        return text_reply(f"REPORT: {last_message_text(request)[:300]}")
    return tool_call_reply("run_command", {"command": "rm -rf build && echo removed"})


def test_an_approval_by_reaction_runs_the_command_and_records_who(configure, start_gateway, people, workspace,
                                                                  runtime):
    (workspace / "build").mkdir()
    configure(chat_parent(lambda text: {"goal": "clean the build"}, cleaning_child), approvals="ask")
    gateway = start_gateway()
    room = room_with_bot(people)
    alice, mallory = people["alice"], people["mallory"]
    alice.invite(room, mallory.user_id)
    mallory.join(room)
    alice.say(room, "clean up please")
    wait_said(people, room, "Approval needed")
    [request] = [m for m in alice.messages(room, people["bot"].user_id)
                 if m["content"]["body"].startswith("Approval needed")]
    assert "rm -rf build" in request["content"]["body"] and "react ✅ to approve" in request["content"]["body"]
    mallory.react(room, request["event_id"], "✅")  # not an allowed user: decides nothing
    wait_said(people, room, "may not decide requests here", gateway=gateway)
    assert (workspace / "build").exists()
    alice.react(room, request["event_id"], "✅")
    wait_said(people, room, "REPORT:")
    assert not (workspace / "build").exists()
    [row] = runtime.ledger().approvals()
    assert (row["state"], row["decided_by"]) == ("allowed", f"matrix:{alice.user_id}")
    wait_until(lambda: f"approved by matrix:{alice.user_id}" in bot_text(people, room), "the request edited")
    stop(gateway)


def test_a_result_over_the_event_size_limit_arrives_whole_in_several_messages(configure, start_gateway, people):
    lines = [f"line {n:03d} <b>&amp;</b> " + "x" * 80 for n in range(105)]  # ~10,500 characters
    configure(chat_parent(lambda text: {"goal": "long report"}, lambda r: text_reply("\n".join(lines))),
              matrix={"max_event_bytes": 3000})
    gateway = start_gateway()
    room = room_with_bot(people)
    people["alice"].say(room, "report")
    wait_said(people, room, "Result noted.")
    text = bot_text(people, room)
    assert all(line in text for line in lines)
    bodies = [m["content"]["body"] for m in people["alice"].messages(room, people["bot"].user_id)]
    assert sum(b.startswith(RESULT_HEADER) for b in bodies) >= 4  # every part carries the header
    assert len({b for b in bodies if b.startswith(RESULT_HEADER)}) == len([b for b in bodies
                                                                             if b.startswith(RESULT_HEADER)])
    stop(gateway)


def test_a_rate_limit_burst_delays_results_but_delivers_each_once(configure, start_gateway, people, runtime):
    people["admin"].admin_override_ratelimit(people["bot"].user_id, per_second=1, burst=2)
    configure(chat_parent(lambda text: {"tasks": [{"goal": f"{text}-{n}"} for n in range(4)]}, echo_goal),
              independent_completions=True)
    gateway = start_gateway()
    room = room_with_bot(people)
    people["alice"].say(room, "burst")
    for n in range(4):
        wait_said(people, room, f"result of burst-{n}", timeout_s=120)
    gateway.wait_for(r"M_LIMIT_EXCEEDED; retrying", timeout_s=60)  # the server really pushed back
    headers = [m["content"]["body"].split("\n", 1)[0] for m in results(people, room)]
    assert len(headers) == len(set(headers)) == 4, headers
    stop(gateway)


def test_an_encrypted_room_is_told_once_that_the_bot_cannot_read_it(configure, start_gateway, people):
    server = configure(chat_parent(lambda text: {"goal": text}, echo_goal))
    gateway = start_gateway()
    room = room_with_bot(people, encrypted=True)
    alice = people["alice"]
    for _ in range(2):
        alice.send(room, "m.room.encrypted", {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgA",
                                              "device_id": "X", "sender_key": "k", "session_id": "s"})
    wait_said(people, room, "cannot read encrypted messages")
    plain = alice.create_room(invite=[people["bot"].user_id])
    wait_until(lambda: joined(alice, plain, people["bot"].user_id), "the second room joined")
    alice.say(plain, "alpha")  # a later event: the encrypted room's notices are all out by then
    wait_said(people, plain, "result of alpha")
    notices = [m for m in alice.messages(room, people["bot"].user_id) if "encrypted" in m["content"]["body"]]
    assert len(notices) == 1 and "create a new room with encryption off" in notices[0]["content"]["body"]
    assert "AwgA" not in str([r["messages"] for r in server.requests])
    stop(gateway)


def test_a_result_reaches_its_thread_once_across_a_sigkill_and_a_synapse_restart(
        configure, cli, tmp_path, runtime, monkeypatch):
    """Its own Synapse (stopped while the gateway is dead, started again while the next one
    retries): the shared one stays up for the other tests."""
    with OwnSynapse(tmp_path / "synapse") as own:
        people = {role: register(own.server, role) for role in ("bot", "alice")}
        monkeypatch.setenv("MATRIX_ACCESS_TOKEN", people["bot"].token)
        configure(chat_parent(fan_out, slow_hangs_once({})), resume="auto",
                  matrix={"user_id": people["bot"].user_id, "allowed_user_ids": [people["alice"].user_id]},
                  url=own.server.url)
        first = cli("gateway", "-v")
        first.wait_for(r"serving Matrix as @bot")
        room = room_with_bot(people)
        root = people["alice"].say(room, "a thread")
        people["alice"].say(room, "alpha", thread=root)
        wait_until(lambda: [r for r in running_rows(runtime.ledger())
                            if len((r.result or {}).get("results") or []) >= 1], "one child recorded")
        first.kill()  # SIGKILL: one child finished, one still running (resumed by the next gateway)
        own.stop()  # the homeserver goes down too, and the next gateway starts without it
        second = cli("gateway", "-v")
        second.wait_for(r"serving Matrix as @bot")
        second.wait_for(r"matrix sync: network error .* retrying")
        own.start()
        wait_said(people, room, "result of alpha-slow", thread=root, gateway=second)
        wait_said(people, room, "result of alpha-fast", thread=root)
        wait_said(people, room, "Result noted.", thread=root)
        wait_said(people, room, "result of a thread-fast", thread="")  # the root message's own work
        wait_until(lambda: not pending_rows(runtime.ledger()), "every result acknowledged")
        stop(second)
        third = cli("gateway", "-v")  # a second restart must not show it again either
        third.wait_for(r"restored \d+ undelivered result")
        stop(third)
        assert len(results(people, room, thread=root)) == 1
        assert "alpha" not in str(results(people, room, thread=""))  # there: the root message's own work
        assert pending_rows(runtime.ledger()) == []


@pytest.mark.parametrize("matrix, token, expected", [
    ({}, "", r"no Matrix access token: export MATRIX_ACCESS_TOKEN="),
    ({"user_id": ""}, "tok-4711", r"gateway.matrix.homeserver is set but not the bot's id"),
    ({}, "wrong-token", r"M_UNKNOWN_TOKEN.*gateway.matrix.token_env"),
])
def test_a_matrix_gateway_that_cannot_serve_says_what_to_fix(configure, cli, monkeypatch, matrix, token, expected):
    configure(chat_parent(lambda text: {"goal": text}, echo_goal), matrix=matrix)
    monkeypatch.setenv("MATRIX_ACCESS_TOKEN", token)
    proc = cli("gateway")
    assert proc.finish() == 2
    proc.wait_for(expected)
    assert "Traceback" not in proc.output and (not token or token not in proc.output)
