"""The MCP server's shared watcher on a PostgreSQL ledger (issue 43 point 3): it LISTENs on the
ledger's completion channel with one connection, so a result settled by any host wakes every
waiter at once; the poller is not needed for that."""
from __future__ import annotations

import anyio
import psycopg
import pytest

from offload.ledger.postgres.ledger import PostgresLedger
from offload.ledger.postgres.sql import notify_channel
from offload.mcp_server.watcher import Watcher

pytestmark = pytest.mark.timeout(60)


def test_a_notification_on_the_ledger_s_channel_wakes_the_waiters(pg_schema):
    ledger = PostgresLedger(pg_schema.url, host_id="mcp-host")
    watcher = Watcher(lambda: 0, poll_s=3600.0).start(ledger)  # the poller never looks: only LISTEN can wake
    woken: list[int] = []
    try:
        assert watcher._listener is not None and watcher._listener.listening.wait(10)

        async def body():
            async def waiter(k: int) -> None:
                await watcher.sleep(50)
                woken.append(k)
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for k in range(20):
                        tg.start_soon(waiter, k)
                    await anyio.sleep(0.2)  # the waiters are asleep (they wait for the notification itself)
                    with psycopg.connect(pg_schema.url, autocommit=True) as conn:
                        conn.execute("SELECT pg_notify(%s, %s)", (notify_channel(pg_schema.name), "deleg_x"))
        anyio.run(body)
        assert sorted(woken) == list(range(20))
    finally:
        watcher.close()
        ledger.close()
