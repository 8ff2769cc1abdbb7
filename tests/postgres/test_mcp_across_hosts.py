"""``offload mcp`` on a shared PostgreSQL ledger: a server on one host is SIGKILLed while its
children run, and a server on another host (its own home, its own host id, the same ledger and
namespace, the same workspace) answers ``delegation_result`` for that id once the dead owner's
lease has run out: the finished child keeps its real result, the unfinished one is resumed there
and finishes; the result is listed delivered."""
from __future__ import annotations

import os
import signal

import anyio
import pytest

from tests.mcp_server.mcp_support import HOLD, GatedModel, call, mcp_client
from tests.postgres.conftest import LEASE_S, host_home

pytestmark = pytest.mark.timeout(120)
DEADLINE_S = 30.0


def test_a_killed_servers_delegation_is_resumed_by_a_server_on_another_host(tmp_path, pg_schema, monkeypatch):
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", pg_schema.url)
    gated = GatedModel()
    auto = {"delegation": {"resume": "auto"}}
    home_a, home_b = host_home(tmp_path, "host-a", auto), host_home(tmp_path, "host-b", auto)
    project = tmp_path / "project"  # the workspace both hosts mount, where a resumed child continues
    project.mkdir()

    async def body():
        monkeypatch.setenv("OFFLOAD_HOST_ID", "host-a")
        async with mcp_client(home_a, "--namespace", "shared", model=gated, cwd=project, tolerate_exit=True) as first:
            handle = (await call(first, "delegate_task", tasks=[{"goal": "quick part"},
                                                                 {"goal": f"{HOLD} endless part"}])).structured_content
            with anyio.fail_after(DEADLINE_S):
                while (status := (await call(first, "delegation_status",
                                             delegation_id=handle["delegation_id"])).structured_content)[
                        "children_done"] < 1:
                    await anyio.sleep(0.05)
            os.kill(status["owner_pid"], signal.SIGKILL)
        gated.gate.set()
        monkeypatch.setenv("OFFLOAD_HOST_ID", "host-b")
        async with mcp_client(home_b, "--namespace", "shared", model=gated, cwd=project) as second:
            result = await call(second, "delegation_result", delegation_id=handle["delegation_id"],
                                wait_s=LEASE_S + DEADLINE_S)
            assert result.structured_content["state"] == "completed", result.structured_content
            assert "finished: quick part" in result.content[0].text  # kept from the dead server
            assert "finished: HOLD endless part" in result.content[0].text  # resumed on host-b
            assert [c["state"] for c in result.structured_content["children"]] == ["completed", "completed"]
            listed = (await call(second, "list_delegations")).structured_content["delegations"]
            assert [(d["delegation_id"], d["delivered"]) for d in listed] == [(handle["delegation_id"], True)]

    try:
        with gated.server:
            anyio.run(body)
    finally:
        gated.gate.set()
