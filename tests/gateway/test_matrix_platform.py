"""``MatrixPlatform`` and ``MatrixClient`` against a real Synapse (``.ci/synapse-up``): the sync
position and event-id dedupe (no replay, no loss across a crash), idempotent result sends, the
reply command for buttons; and the retry policy against a loopback stub that answers 5xx and
``M_LIMIT_EXCEEDED``."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from offload.gateway.matrix.adapter import MatrixPlatform
from offload.gateway.matrix.client import MatrixAuthError, MatrixClient
from offload.gateway.platform import SendFailed, sending_result
from offload.gateway.state import GatewayState
from tests.matrix_support import register, synapse_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def synapse():
    return synapse_server()


@pytest.fixture
def bot_and_alice(synapse):
    bot, alice = register(synapse, "bot"), register(synapse, "alice")
    yield bot, alice
    bot.close()
    alice.close()


@pytest.fixture
def platform_for(bot_and_alice, synapse, tmp_path):
    bot, alice = bot_and_alice
    clients = []

    def make() -> MatrixPlatform:
        clients.append(MatrixClient(synapse.url, bot.user_id, bot.token, backoff_s=0.05))
        return MatrixPlatform(clients[-1], GatewayState("matrix", tmp_path), {alice.user_id})
    yield make
    for client in clients:
        client.close()


@pytest.fixture
def talking(platform_for, bot_and_alice):
    """A room alice and the bot share, the platform synced past its history, and alice's first
    message ("hi") handed over: (platform, room, what was handed over)."""
    bot, alice = bot_and_alice
    room = alice.create_room(invite=[bot.user_id])
    bot.join(room)
    platform, got = platform_for(), []
    platform.poll(1, got.append)
    alice.say(room, "hi")
    poll_until(platform, got, 1)
    return platform, room, got


def poll_until(platform: MatrixPlatform, got: list, count: int, rounds: int = 20) -> None:
    for _ in range(rounds):
        if len(got) >= count:
            return
        platform.poll(1, got.append)


def test_no_history_on_the_first_start_and_a_restart_continues_where_it_stopped(platform_for, bot_and_alice):
    bot, alice = bot_and_alice
    room = alice.create_room(invite=[bot.user_id])
    bot.join(room)
    alice.say(room, "before the bot ever ran")
    first, got = platform_for(), []
    first.poll(1, got.append)  # the first sync: history, handed over to nobody
    alice.say(room, "one")
    alice.say(room, "two")
    poll_until(first, got, 2)
    alice.say(room, "while it was down")
    second = platform_for()  # a new process on the same state
    alice.say(room, "three")
    poll_until(second, got, 4)
    assert [m.text for m in got] == ["one", "two", "while it was down", "three"]  # nothing skipped, nothing twice


def test_a_batch_handled_before_a_crash_is_not_handed_over_twice(platform_for, bot_and_alice, talking):
    platform, room, got = talking
    before = platform.state.read()["since"]
    bot_and_alice[1].say(room, "once")
    poll_until(platform, got, 2)
    platform.state.update(lambda data: data.__setitem__("since", before))  # as if the save was lost
    again = platform_for()
    bot_and_alice[1].say(room, "next")
    poll_until(again, got, 3)
    assert [m.text for m in got] == ["hi", "once", "next"]


def test_a_result_sent_twice_with_its_delegation_id_is_one_event(platform_for, bot_and_alice, talking):
    platform, room, got = talking
    bot, alice = bot_and_alice
    with sending_result("deleg_x"):
        first = platform.send(got[0].route, "the result", header="Background result deleg_x")
        retried = platform_for().send(got[0].route, "the result", header="Background result deleg_x")
    assert first == retried  # the server recognised the transaction id
    assert len(alice.messages(room, bot.user_id)) == 1


def test_a_reply_approve_to_a_request_is_a_press_of_its_first_button(bot_and_alice, talking):
    platform, room, got = talking
    alice = bot_and_alice[1]
    [request] = platform.send(got[0].route, "may I?", header="Approval needed",
                              buttons=[("Approve", "apr:r1:allow"), ("Deny", "apr:r1:deny")])
    alice.say(room, "> <@bot> may I?\n\ndeny", reply_to=request)
    poll_until(platform, got, 2)
    assert (got[1].button, got[1].message_id, got[1].user_id) == ("apr:r1:deny", request, alice.user_id)


class _Stub(BaseHTTPRequestHandler):
    answers: list[tuple[int, dict]] = []
    seen: list[float] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(time.monotonic())
        status, body = self.answers.pop(0) if self.answers else (200, {"next_batch": "s1", "rooms": {}})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def stub():
    _Stub.answers, _Stub.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_5xx_backs_off_and_a_rate_limit_waits_what_the_server_asked(stub):
    _Stub.answers = [(502, {}), (503, {}),
                     (429, {"errcode": "M_LIMIT_EXCEEDED", "error": "slow down", "retry_after_ms": 400})]
    client = MatrixClient(stub, "@bot:x", "secret-token", backoff_s=0.05)
    try:
        assert client.call("sync", lambda api: api.sync(timeout=0))["next_batch"] == "s1"
    finally:
        client.close()
    assert len(_Stub.seen) == 4 and _Stub.seen[3] - _Stub.seen[2] >= 0.4


def test_the_budget_runs_out_as_send_failed_and_a_bad_token_names_the_variable(stub):
    _Stub.answers = [(502, {})] * 3
    client = MatrixClient(stub, "@bot:x", "secret-token", max_attempts=3, backoff_s=0.01)
    try:
        with pytest.raises(SendFailed, match="after 3 attempts: 502"):
            client.call("sync", lambda api: api.sync(timeout=0))
        _Stub.answers = [(401, {"errcode": "M_UNKNOWN_TOKEN", "error": "Invalid access token passed."})]
        with pytest.raises(MatrixAuthError, match="gateway.matrix.token_env") as raised:
            client.call("sync", lambda api: api.sync(timeout=0))
        assert "secret-token" not in str(raised.value)
    finally:
        client.close()
