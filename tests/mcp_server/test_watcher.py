"""The shared watcher of an ``offload mcp`` server (issue 43 point 3): a wait is woken by a unit
another process finished (the ledger poller, not this server's bus), every waiter of one loop
wakes on one change with no thread per waiter, and ``close()`` (SIGTERM) ends every wait."""
from __future__ import annotations

import asyncio
import threading
import time

import anyio
import pytest

from offload.mcp_server.delegations import FALLBACK_S
from offload.mcp_server.watcher import Watcher
from tests.mcp_server.mcp_support import HOLD, call, mcp_client

pytestmark = pytest.mark.timeout(120)


def test_a_wait_wakes_when_another_server_s_unit_finishes(tmp_path, model):
    async def body():
        async with mcp_client(tmp_path, "--namespace", "shared", model=model, name="a") as owner, \
                mcp_client(tmp_path, "--namespace", "shared", model=model, name="b") as watcher:
            handle = (await call(owner, "delegate_task", goal=f"{HOLD} then finish")).structured_content
            result: dict = {}
            waiting = anyio.Event()

            async def on_progress(progress, total, message) -> None:
                waiting.set()  # the first progress is sent as the wait goes to sleep

            async def wait() -> None:
                out = await watcher.call_tool("delegation_result", {"delegation_id": handle["delegation_id"],
                                                                    "wait_s": 3600},
                                              progress_callback=on_progress)
                result.update(out.structured_content)
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await waiting.wait()
                released = time.monotonic()
                model.gate.set()  # the owner server finishes it; the waiting server's bus never hears of it
            # Unwoken, a wait re-reads its row only every FALLBACK_S: returning sooner means it was woken.
            assert time.monotonic() - released < FALLBACK_S
            assert result["state"] == "completed" and result["delivered"] is True, result
    anyio.run(body)


def test_one_change_wakes_every_waiter_without_a_thread_each_and_close_ends_them():
    state = {"n": 0}
    watcher = Watcher(lambda: state["n"], poll_s=0.02).start()
    woken: list[int] = []

    async def body():
        threads = threading.active_count()

        async def waiter(k: int) -> None:
            await watcher.sleep(60)
            woken.append(k)
        watcher.waiting(1)
        async with anyio.create_task_group() as tg:
            for k in range(100):
                tg.start_soon(waiter, k)
            await asyncio.sleep(0.1)  # every waiter is asleep (nothing to join on: they wait for the change)
            assert threading.active_count() == threads and not woken
            state["n"] += 1  # what the ledger poller sees change
        assert sorted(woken) == list(range(100))
        watcher.close()
        with anyio.fail_after(5):
            await watcher.sleep(60)  # closed: returns at once
        watcher.waiting(-1)
    anyio.run(body)
