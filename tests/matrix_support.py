"""A real Synapse for the Matrix gateway tests: the server ``.ci/synapse-up`` starts, fresh users
per test (registered with the shared-secret admin API), and a plain client-server API client
(httpx) that plays the person in the room. Without ``OFFLOAD_TEST_SYNAPSE_URL`` a test needing
it skips with the command that provides it -- except under ``CI=true``, where it fails.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import httpx
import pytest

START_COMMAND = 'eval "$(.ci/synapse-up)"'
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Synapse:
    url: str
    secret: str
    server_name: str


def synapse_server() -> Synapse:
    url = os.environ.get("OFFLOAD_TEST_SYNAPSE_URL", "").strip()
    if url:
        return Synapse(url, os.environ["OFFLOAD_TEST_SYNAPSE_SECRET"],
                       os.environ.get("OFFLOAD_TEST_SYNAPSE_SERVER_NAME", "offload.test"))
    message = f"needs Synapse: run `{START_COMMAND}` first (sets OFFLOAD_TEST_SYNAPSE_URL)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but OFFLOAD_TEST_SYNAPSE_URL is not set; .ci/run must start it: {message}")
    pytest.skip(message)


def register(server: Synapse, prefix: str, admin: bool = False) -> MatrixUser:
    """A new user on ``server`` (shared-secret registration: /_synapse/admin/v1/register)."""
    name, password = f"{prefix}{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with httpx.Client(base_url=server.url, timeout=30) as http:
        nonce = http.get("/_synapse/admin/v1/register").json()["nonce"]
        mac = hmac.new(server.secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), name.encode(), password.encode(),
                                 b"admin" if admin else b"notadmin"]))
        reply = http.post("/_synapse/admin/v1/register", json={
            "nonce": nonce, "username": name, "password": password, "admin": admin, "mac": mac.hexdigest()})
        reply.raise_for_status()
        body = reply.json()
    return MatrixUser(server, body["user_id"], body["access_token"])


class MatrixUser:
    """A person (or the admin) on the homeserver, speaking the client-server API directly."""

    def __init__(self, server: Synapse, user_id: str, token: str) -> None:
        self.server, self.user_id, self.token = server, user_id, token
        self.http = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {token}"})

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                params: dict[str, Any] | None = None) -> dict[str, Any]:
        for _ in range(50):  # the test user obeys the rate limit too
            reply = self.http.request(method, path, json=body, params=params)
            if reply.status_code != 429:
                break
            time.sleep(reply.json().get("retry_after_ms", 500) / 1000)
        assert reply.status_code == 200, f"{method} {path}: {reply.status_code} {reply.text}"
        return reply.json()

    def create_room(self, invite: list[str] = (), encrypted: bool = False, name: str = "") -> str:
        body: dict[str, Any] = {"preset": "private_chat", "invite": list(invite), "name": name or "offload test"}
        if encrypted:
            body["initial_state"] = [{"type": "m.room.encryption", "state_key": "",
                                      "content": {"algorithm": "m.megolm.v1.aes-sha2"}}]
        return self.request("POST", "/_matrix/client/v3/createRoom", body)["room_id"]

    def join(self, room_id: str) -> None:
        self.request("POST", f"/_matrix/client/v3/join/{quote(room_id)}", {})

    def invite(self, room_id: str, user_id: str) -> None:
        self.request("POST", f"/_matrix/client/v3/rooms/{quote(room_id)}/invite", {"user_id": user_id})

    def send(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        path = f"/_matrix/client/v3/rooms/{quote(room_id)}/send/{event_type}/{uuid.uuid4().hex}"
        return self.request("PUT", path, content)["event_id"]

    def say(self, room_id: str, text: str, thread: str = "", reply_to: str = "") -> str:
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if thread:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread, "is_falling_back": True,
                                       "m.in_reply_to": {"event_id": thread}}
        elif reply_to:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
        return self.send(room_id, "m.room.message", content)

    def react(self, room_id: str, event_id: str, key: str) -> str:
        return self.send(room_id, "m.reaction", {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id,
                                                                  "key": key}})

    def events(self, room_id: str) -> list[dict[str, Any]]:
        """Every event of the room, oldest first (paginated backwards from now)."""
        out: list[dict[str, Any]] = []
        params: dict[str, Any] = {"dir": "b", "limit": 100}
        while True:
            page = self.request("GET", f"/_matrix/client/v3/rooms/{quote(room_id)}/messages", params=params)
            out.extend(page.get("chunk") or [])
            if not page.get("end") or not page.get("chunk"):
                return out[::-1]
            params["from"] = page["end"]

    def messages(self, room_id: str, sender: str, thread: str | None = None) -> list[dict[str, Any]]:
        """``sender``'s messages in the room (in one thread when ``thread`` is given; "" = the
        main timeline), edits folded into the message they replace."""
        events = self.events(room_id)
        edits = {e["content"]["m.relates_to"]["event_id"]: e["content"]["m.new_content"] for e in events
                 if e.get("type") == "m.room.message" and _rel(e).get("rel_type") == "m.replace"}
        out = []
        for e in events:
            if e.get("type") != "m.room.message" or e.get("sender") != sender or _rel(e).get("rel_type") == "m.replace":
                continue
            in_thread = _rel(e).get("event_id", "") if _rel(e).get("rel_type") == "m.thread" else ""
            if thread is None or in_thread == thread:
                out.append({**e, "content": edits.get(e["event_id"], e["content"]), "edited": e["event_id"] in edits})
        return out

    def text(self, room_id: str, sender: str, thread: str | None = None) -> str:
        return "\n".join(m["content"].get("body", "") for m in self.messages(room_id, sender, thread))

    def admin_override_ratelimit(self, user_id: str, per_second: int, burst: int) -> None:
        self.request("POST", f"/_synapse/admin/v1/users/{quote(user_id)}/override_ratelimit",
                     {"messages_per_second": per_second, "burst_count": burst})

    def close(self) -> None:
        self.http.close()


def _rel(event: dict[str, Any]) -> dict[str, Any]:
    relates = (event.get("content") or {}).get("m.relates_to")
    return relates if isinstance(relates, dict) else {}


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 60.0, every_s: float = 0.2) -> Any:
    """Poll the homeserver until ``check()`` is truthy (the server is the observable: it has no
    push to a test); fails naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


class OwnSynapse:
    """A Synapse of one test's own (``.ci/synapse-up`` with its own directory), for a test that
    restarts the server; ``stop()`` then ``start()`` brings it back on the same port and data."""

    def __init__(self, directory: Path) -> None:
        synapse_server()  # skip (or fail under CI) where the shared one is missing: the tooling is too
        self.env = {**os.environ, "OFFLOAD_SYNAPSE_DIR": str(directory)}
        self.server = self._up()

    def _up(self) -> Synapse:
        out = subprocess.run([str(ROOT / ".ci" / "synapse-up")], env=self.env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        values = dict(line.removeprefix("export ").split("=", 1) for line in out.stdout.splitlines()
                      if line.startswith("export "))
        return Synapse(values["OFFLOAD_TEST_SYNAPSE_URL"], values["OFFLOAD_TEST_SYNAPSE_SECRET"],
                       values["OFFLOAD_TEST_SYNAPSE_SERVER_NAME"])

    def stop(self) -> None:
        subprocess.run([str(ROOT / ".ci" / "synapse-up"), "stop"], env=self.env, check=True, timeout=60)

    def start(self) -> None:
        """Start it again (after ``stop``): same data, same port, so the same URL."""
        restarted = self._up()
        assert restarted.url == self.server.url, (restarted, self.server)

    def __enter__(self) -> OwnSynapse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
