"""A SIGKILL of ``offload mcp`` while children run, then a new server on the same home: the
client gets the result for that id (finished children keep their real results, the unfinished
one is resumed by the new server and finishes), never "no such delegation", and once read it
is listed as delivered."""
from __future__ import annotations

import os
import signal

import anyio
import pytest

from tests.mcp_server.mcp_support import HOLD, call, mcp_client

pytestmark = pytest.mark.timeout(120)
DEADLINE_S = 30.0


async def _until_one_child_done(client, delegation_id: str) -> dict:
    """Status once the quick child is recorded (it lives in another process: poll its status)."""
    with anyio.fail_after(DEADLINE_S):
        while True:
            status = (await call(client, "delegation_status", delegation_id=delegation_id)).structured_content
            if status["children_done"] == 1:
                return status
            await anyio.sleep(0.05)


def test_a_killed_server_s_delegation_is_resumed_by_the_next_one(tmp_path, model):
    (tmp_path / "config.yaml").write_text("delegation: {resume: auto}\n")

    async def body():
        async with mcp_client(tmp_path, model=model, tolerate_exit=True) as first:
            handle = (await call(first, "delegate_task", tasks=[{"goal": "quick part"},
                                                                 {"goal": f"{HOLD} endless part"}])).structured_content
            status = await _until_one_child_done(first, handle["delegation_id"])
            assert status["state"] == "running" and status["owner_pid"]
            os.kill(status["owner_pid"], signal.SIGKILL)
        model.gate.set()  # the held request's connection is gone with its process anyway
        async with mcp_client(tmp_path, model=model) as second:
            result = await call(second, "delegation_result", delegation_id=handle["delegation_id"], wait_s=30)
            assert result.structured_content["state"] == "completed", result.structured_content
            text = result.content[0].text
            assert "finished: quick part" in text  # the finished child's real result
            assert "finished: HOLD endless part" in text  # the resumed child's, asked again
            assert [c["state"] for c in result.structured_content["children"]] == ["completed", "completed"]
            listed = (await call(second, "list_delegations")).structured_content["delegations"]
            assert [(d["delegation_id"], d["delivered"]) for d in listed] == [(handle["delegation_id"], True)]
    anyio.run(body)
