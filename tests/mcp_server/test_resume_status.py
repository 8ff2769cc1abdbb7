"""A resumed child is seen over MCP (issue 44 point 5): ``offload mcp`` SIGKILLed while its
child's model call was in flight, then a new server on the same home (``delegation.resume:
auto``) resumes the unit. Through the SDK client: the Tasks status message says the unit was
resumed while it runs and, once done, which child resumed from which step and how many model
calls were issued twice; ``delegation_status`` / ``delegation_result`` carry the result
document's ``resumed`` and the result's text says it too."""
from __future__ import annotations

import os
import signal

import anyio
import pytest
import yaml

from offload.mcp_server.tasks_client import CreateTaskResult, TasksClient, get_task
from tests.mcp_server.mcp_support import HOLD, call, mcp_client

pytestmark = pytest.mark.timeout(120)
DEADLINE_S = 30.0


async def until(check) -> None:
    with anyio.fail_after(DEADLINE_S):
        while not await check():
            await anyio.sleep(0.05)


def _held(model) -> int:
    return sum(1 for r in model.server.requests if HOLD in str(r.get("messages")))


def test_the_tasks_status_and_the_result_say_the_child_resumed(tmp_path, model):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"delegation": {"resume": "auto"}}))

    async def body():
        async with mcp_client(tmp_path, model=model, extensions=[TasksClient()], tolerate_exit=True) as first:
            created = await first.session.call_tool("delegate_task", {"goal": f"{HOLD} long"}, allow_claimed=True)
            assert isinstance(created, CreateTaskResult)
            did = created.task_id
            await until(lambda: anyio.to_thread.run_sync(lambda: _held(model) == 1))  # its model call in flight
            owner = (await call(first, "delegation_status", delegation_id=did)).structured_content["owner_pid"]
            os.kill(owner, signal.SIGKILL)
        async with mcp_client(tmp_path, model=model, extensions=[TasksClient()]) as second:
            async def reissued() -> bool:  # the resumed child's call waits on the gate too
                return _held(model) == 2
            await until(reissued)
            working = await get_task(second.session, did)
            assert working.status == "working", working
            assert f"0/1 subagents done; ↻ resumed after pid {owner} on host " in working.status_message
            status = (await call(second, "delegation_status", delegation_id=did)).structured_content
            assert status["resumed"]["after"]["pid"] == owner and status["children"][0]["resumed"] is None
            model.gate.set()
            result = await call(second, "delegation_result", delegation_id=did, wait_s=DEADLINE_S)
            done = result.structured_content
            assert done["state"] == "completed", done
            resumed = done["children"][0]["resumed"]
            assert (resumed["from_step"], resumed["model_calls_reissued"], resumed["after"]["pid"]) == (0, 1, owner)
            line = f"#1 ↻ resumed from step 0 after pid {owner} on host "
            assert line in result.content[0].text and "(1 model call re-issued)" in result.content[0].text
            finished = await get_task(second.session, did)
            assert finished.status == "completed" and finished.status_message.startswith(
                f"delegation completed; {line}"), finished
    anyio.run(body)


def test_a_running_server_resumes_a_unit_whose_owner_died_without_being_asked(tmp_path, model):
    """A server already serving when another owner on its home dies (here another `offload mcp`)
    takes the unit over within its claim check (2 s), not only at its own start or when a client
    asks about that row: nothing is called on it before the child's model call is re-issued."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"delegation": {"resume": "auto"}}))

    async def body():
        async with mcp_client(tmp_path, model=model) as bystander:  # the same client name: one namespace
            async with mcp_client(tmp_path, model=model, tolerate_exit=True) as owner_client:
                did = (await call(owner_client, "delegate_task", goal=f"{HOLD} long")).structured_content[
                    "delegation_id"]
                await until(lambda: anyio.to_thread.run_sync(lambda: _held(model) == 1))
                owner = (await call(owner_client, "delegation_status", delegation_id=did)).structured_content[
                    "owner_pid"]
                os.kill(owner, signal.SIGKILL)

            async def reissued() -> bool:  # the bystander's recovery loop resumed it, unasked
                return _held(model) == 2
            await until(reissued)
            model.gate.set()
            result = await call(bystander, "delegation_result", delegation_id=did, wait_s=DEADLINE_S)
            done = result.structured_content
            assert done["state"] == "completed" and done["children"][0]["resumed"]["after"]["pid"] == owner, done
    anyio.run(body)
