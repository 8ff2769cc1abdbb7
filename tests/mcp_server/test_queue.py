"""The admission queue seen from an MCP client (issue 43 point 4): stopping a queued delegation
takes it out of the queue (it never runs, as with ``offload stop``) and its task reports
``cancelled``; concurrent calls fill the queue to exactly its limit; the refusal names no
``background=false``, which MCP does not offer."""
from __future__ import annotations

import anyio
import pytest

from offload.mcp_server.tasks_client import CreateTaskResult, TasksClient, cancel_task, get_task
from tests.mcp_server.mcp_support import HOLD, call, mcp_client

pytestmark = pytest.mark.timeout(120)
QUEUE_LIMIT = 4


def _config(home, max_queued: int = 100) -> None:
    (home / "config.yaml").write_text(f"delegation:\n  max_concurrent_children: 1\n  at_capacity: queue\n"
                                      f"  max_queued: {max_queued}\n  max_queued_per_session: {max_queued}\n",
                                      encoding="utf-8")


def test_stopping_a_queued_delegation_removes_it_from_the_queue_and_its_task_is_cancelled(tmp_path, model):
    _config(tmp_path)

    async def body():
        async with mcp_client(tmp_path, model=model, extensions=[TasksClient()]) as client:
            await client.session.call_tool("delegate_task", {"goal": f"{HOLD} hold the only slot"}, allow_claimed=True)
            created = await client.session.call_tool("delegate_task", {"goal": "never runs"}, allow_claimed=True)
            queued = (await call(client, "delegation_status", delegation_id=created.task_id)).structured_content
            assert queued["state"] == "queued", queued
            stopped = (await call(client, "stop_delegation", delegation_id=queued["delegation_id"])).structured_content
            assert stopped["stopped"] is True and "removed from the queue" in stopped["note"], stopped
            task = await client.session.call_tool("delegate_task", {"goal": "queued task"}, allow_claimed=True)
            assert isinstance(task, CreateTaskResult)
            await cancel_task(client.session, task.task_id)
            assert (await get_task(client.session, task.task_id)).status == "cancelled"
            model.gate.set()  # the slot frees: nothing stopped may start now
            for did in (queued["delegation_id"], task.task_id):
                out = (await call(client, "delegation_result", delegation_id=did, wait_s=30)).structured_content
                assert out["state"] == "interrupted" and "never ran" in out["text"], out
            assert not any("never runs" in str(r) or "queued task" in str(r) for r in model.server.requests)
    anyio.run(body)


def test_concurrent_calls_fill_the_queue_to_exactly_its_limit_and_the_refusal_fits_mcp(tmp_path, model):
    _config(tmp_path, QUEUE_LIMIT)

    async def body():
        async with mcp_client(tmp_path, model=model) as client:
            await call(client, "delegate_task", goal=f"{HOLD} hold the only slot")
            results: list = []

            async def one(k: int) -> None:
                results.append(await client.call_tool("delegate_task", {"goal": f"{HOLD} queued {k}"}))
            async with anyio.create_task_group() as tg:
                for k in range(QUEUE_LIMIT * 3):
                    tg.start_soon(one, k)
            admitted = [r for r in results if not r.is_error]
            refused = [r.content[0].text for r in results if r.is_error]
            assert len(admitted) == QUEUE_LIMIT, [r.content[0].text for r in results]
            assert refused and all("delegation.max_queued" in t and "background=false" not in t for t in refused)
            model.gate.set()
    anyio.run(body)
