"""Closing an MCP client hands its work over (issue 44, point 4): an SDK client over stdio starts a
slow delegation and closes; the server exits promptly, the per-home background worker finishes
the child, and a new client on the same home reads the completed result (not ``unknown``),
delivered once. The same for SIGTERM of ``offload mcp --http`` with a running child. Resuming is
opted into explicitly (``delegation.resume: auto``) whatever the default is."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import anyio
import pytest
import yaml

from offload.owner import home_worker
from offload.ledger import open_ledger
from tests.mcp_server.mcp_support import HOLD, HttpServer, call, http_client, mcp_client

# The per-home background worker is the single-host ledger's; on PostgreSQL any host's `offload worker`
# takes a handed-over unit (tests/e2e/test_hand_over_pg_e2e.py).
pytestmark = [pytest.mark.sqlite_only, pytest.mark.timeout(120)]
DEADLINE_S = 30.0
EXIT_WITHIN_S = 3.0  # an MCP server must be gone within a couple of seconds of its client


@pytest.fixture(autouse=True)
def resume_auto(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"delegation": {"resume": "auto"}}), encoding="utf-8")
    yield
    home_worker.kill(tmp_path)  # the background worker the test started


class Asked:
    """Counts the model requests of held goals, so the test knows a child's call is in flight."""

    def __init__(self) -> None:
        self.count, self.seen = 0, threading.Condition()

    def wait(self, count: int) -> None:
        with self.seen:
            assert self.seen.wait_for(lambda: self.count >= count, DEADLINE_S), f"{count} held model call(s) never came"


def _count_held(model) -> Asked:
    asked = Asked()
    original = model.script

    def script(request):
        text = " ".join(str(m.get("content")) for m in request.get("messages") or [])
        if HOLD in text:
            with asked.seen:
                asked.count += 1
                asked.seen.notify_all()
        return original(request)
    model.server.script = script  # the server calls it per request
    return asked


def _row(home: Path, delegation_id: str):
    ledger = open_ledger(home / "state.db")
    try:
        return ledger.get(delegation_id)
    finally:
        ledger.close()


def _until_taken(home: Path, delegation_id: str, pid: int):
    """The row once another process runs it (the background worker took the handed-over unit)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        row = _row(home, delegation_id)
        if row.state == "running" and row.owner_pid not in (None, pid):
            return row
        time.sleep(0.05)
    raise AssertionError(f"nobody took {delegation_id} over: {_row(home, delegation_id)}")


async def _read_completed_once(client, delegation_id: str, child_goal: str) -> None:
    result = await call(client, "delegation_result", delegation_id=delegation_id, wait_s=DEADLINE_S)
    assert result.structured_content["state"] == "completed", result.structured_content
    assert f"finished: {child_goal}"[:40] in result.content[0].text
    child = result.structured_content["children"][0]
    assert child["state"] == "completed"
    listed = (await call(client, "list_delegations")).structured_content["delegations"]
    assert [(d["delegation_id"], d["delivered"]) for d in listed] == [(delegation_id, True)]


def test_a_closed_stdio_client_s_delegation_completes_in_the_background_and_is_read_later(tmp_path, model):
    asked = _count_held(model)
    goal = f"{HOLD} slow research"

    async def body():
        async with mcp_client(tmp_path, model=model) as first:
            handle = (await call(first, "delegate_task", goal=goal)).structured_content
            status = (await call(first, "delegation_status", delegation_id=handle["delegation_id"])).structured_content
            await anyio.to_thread.run_sync(asked.wait, 1)  # the child's model call is in flight
            closed_at = time.monotonic()
        return handle["delegation_id"], status["owner_pid"], time.monotonic() - closed_at

    delegation_id, server_pid, closing_s = anyio.run(body)
    assert closing_s < EXIT_WITHIN_S, f"the server took {closing_s:.1f} s to leave after its client closed"
    with pytest.raises(ProcessLookupError):
        os.kill(server_pid, 0)
    taken = _until_taken(tmp_path, delegation_id, server_pid)
    assert taken.owner_pid == home_worker.holder(tmp_path)  # the home's background worker runs it now
    asked.wait(2)  # the call in flight when the client left is issued again, by the worker
    model.gate.set()

    async def later():
        async with mcp_client(tmp_path, model=model) as second:
            await _read_completed_once(second, delegation_id, goal)
    anyio.run(later)
    row = _row(tmp_path, delegation_id)
    assert row.result["results"][0]["resumed"]["after"]["handed_over"] is True
    assert asked.count == 2  # issued once more, never a third time


def test_sigterm_of_the_http_server_hands_a_running_child_to_the_background_worker(tmp_path, model):
    asked = _count_held(model)
    goal = f"{HOLD} slow survey"
    server = HttpServer(tmp_path, model=model)
    try:
        async def start():
            async with http_client(server.url, server.token) as client:
                return (await call(client, "delegate_task", goal=goal)).structured_content["delegation_id"]
        delegation_id = anyio.run(start)
        asked.wait(1)
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(EXIT_WITHIN_S + 5)
        taken = _until_taken(tmp_path, delegation_id, server.proc.pid)
        assert taken.owner_pid == home_worker.holder(tmp_path)
    finally:
        server.stop()
    model.gate.set()
    again = HttpServer(tmp_path, model=model)
    try:
        async def later():
            async with http_client(again.url, again.token) as client:
                await _read_completed_once(client, delegation_id, goal)
        anyio.run(later)
    finally:
        again.stop()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stdio_server_told_to_stop_hands_its_running_child_over(tmp_path, model, signum):
    """SIGTERM/SIGHUP of `offload mcp` over stdio while its client is still connected (a client
    restarting its servers, a closed terminal): the child goes on in the home's worker."""
    asked = _count_held(model)
    goal = f"{HOLD} slow digest"

    async def body():
        async with mcp_client(tmp_path, model=model, tolerate_exit=True) as first:
            handle = (await call(first, "delegate_task", goal=goal)).structured_content
            pid = (await call(first, "delegation_status", delegation_id=handle["delegation_id"])
                   ).structured_content["owner_pid"]
            await anyio.to_thread.run_sync(asked.wait, 1)
            os.kill(pid, signum)
            taken = await anyio.to_thread.run_sync(_until_taken, tmp_path, handle["delegation_id"], pid)
        return handle["delegation_id"], taken

    delegation_id, taken = anyio.run(body)
    assert taken.owner_pid == home_worker.holder(tmp_path)
    model.gate.set()

    async def later():
        async with mcp_client(tmp_path, model=model) as second:
            await _read_completed_once(second, delegation_id, goal)
    anyio.run(later)
    assert _row(tmp_path, delegation_id).result["results"][0]["resumed"]["after"]["handed_over"] is True
