"""Head-of-line blocking in ``offload mcp --http``: ``python -m bench.probes.mcp_waits [--waiters N]``.

N clients (own MCP sessions) wait in ``delegation_result(wait_s=...)`` on a delegation whose
subagent holds, while another client calls ``delegation_status`` again and again: its latency
(p50 / p99, target p99 under 100 ms with 200 waiters, issue 43 point 3) says whether a wait
costs a worker thread. Then the subagent is released and the time until every waiter returned
is measured, and at last SIGTERM with waits still open: the time the server takes to exit.

Raw JSON-RPC over Streamable HTTP (httpx), protocol 2025-11-25, so the load is the server's,
not a client SDK's. The figures are printed as JSON; nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.report.stats import percentile
from offload.owner import home_worker
from offload.testing.model_server import ScriptedModelServer, text_reply

HOLD = "HOLD"
PROTOCOL = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
TOKEN = secrets.token_urlsafe(32)  # the server requires a bearer token on loopback too

OFFLOAD = str(Path(sys.executable).with_name("offload"))


class Session:
    """One MCP client session over raw HTTP."""

    def __init__(self, http: httpx.AsyncClient, url: str, token: str = TOKEN) -> None:
        self.http, self.url, self.next_id = http, url, 1
        self.headers = {"Accept": ACCEPT, "Authorization": f"Bearer {token}"}

    async def open(self, name: str = "bench") -> "Session":
        await self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                          "clientInfo": {"name": name, "version": "1"}})
        await self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                             headers=self.headers)
        return self

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        reply = await self.http.post(self.url, json={"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                                     "params": params}, headers=self.headers, timeout=120)
        reply.raise_for_status()
        if "mcp-session-id" in reply.headers:
            self.headers = {**self.headers, "Mcp-Session-Id": reply.headers["mcp-session-id"],
                            "MCP-Protocol-Version": PROTOCOL}
        return _message(reply)

    async def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        result = (await self.request("tools/call", {"name": name, "arguments": arguments}))["result"]
        if result.get("isError"):
            raise RuntimeError(result["content"][0]["text"])
        return result["structuredContent"]


def _message(reply: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC response in a JSON body or the last ``data:`` of an SSE body."""
    if reply.headers.get("content-type", "").startswith("application/json"):
        return reply.json()
    datas = [line[5:].strip() for line in reply.text.splitlines() if line.startswith("data:")]
    found = [json.loads(d) for d in datas if d]
    return next(m for m in reversed(found) if "result" in m or "error" in m)


def start_server(home: Path, model_url: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "HERMES_HOME": str(home), "OFFLOAD_BASE_URL": model_url, "OFFLOAD_MODEL": "demo-model",
           "OFFLOAD_MCP_TOKEN": TOKEN}
    proc = subprocess.Popen([OFFLOAD, "mcp", "--http", "--port", "0", "--workspace", str(home)], env=env,
                            cwd=str(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.startswith("offload mcp on "):
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep draining
            return proc, line.split()[3]
    raise RuntimeError(f"offload mcp --http did not start (exit {proc.wait()})")


async def _scenario(url: str, gate: threading.Event, n_waiters: int, n_probes: int, wait_s: float
                    ) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=n_waiters + 10, max_keepalive_connections=n_waiters + 10)
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        owner = await Session(http, url).open()
        did = (await owner.tool("delegate_task", goal=f"{HOLD} until the bench releases it"))["delegation_id"]
        waiters = [await Session(http, url).open() for _ in range(n_waiters)]
        tasks = [asyncio.create_task(w.tool("delegation_result", delegation_id=did, wait_s=wait_s)) for w in waiters]
        await asyncio.sleep(1.0)  # every wait is in (a bench may sleep: this is the load's ramp, not a sync)
        probe, latencies_ms = await Session(http, url).open(), []
        for _ in range(n_probes):
            started = time.perf_counter()
            await probe.tool("delegation_status", delegation_id=did)
            latencies_ms.append((time.perf_counter() - started) * 1000)
        still_waiting = sum(1 for t in tasks if not t.done())
        released = time.perf_counter()
        gate.set()
        results = await asyncio.gather(*tasks)
        return {"waiters": n_waiters, "waiting_while_probed": still_waiting, "probes": n_probes,
                "status_p50_ms": round(percentile(latencies_ms, 50), 2),
                "status_p99_ms": round(percentile(latencies_ms, 99), 2),
                "status_max_ms": round(max(latencies_ms), 2),
                "waiters_back_after_release_s": round(time.perf_counter() - released, 3),
                "waiters_completed": sum(1 for r in results if r["state"] == "completed")}


async def _sigterm(proc: subprocess.Popen[str], url: str, wait_s: float) -> float:
    async with httpx.AsyncClient(timeout=120) as http:
        session = await Session(http, url).open()
        did = (await session.tool("delegate_task", goal=f"{HOLD} again"))["delegation_id"]
        waiting = asyncio.create_task(session.tool("delegation_result", delegation_id=did, wait_s=wait_s))
        await asyncio.sleep(0.5)
        started = time.perf_counter()
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)
        waiting.cancel()
        return round(time.perf_counter() - started, 3)


def run(n_waiters: int = 200, n_probes: int = 200, wait_s: float = 60.0) -> dict[str, Any]:
    gate = threading.Event()

    def script(request: dict[str, Any]) -> Any:
        if HOLD in json.dumps(request.get("messages")):
            gate.wait(120)
        return text_reply("done")
    with tempfile.TemporaryDirectory(prefix="offload-bench-mcp-") as tmp, ScriptedModelServer(script) as model:
        proc, url = start_server(Path(tmp), model.url)
        try:
            figures = asyncio.run(_scenario(url, gate, n_waiters, n_probes, wait_s))
            gate.clear()
            figures["sigterm_exit_s_with_a_wait_open"] = asyncio.run(_sigterm(proc, url, wait_s))
        finally:
            gate.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            home_worker.kill(Path(tmp))  # the SIGTERM handed the held delegation over to it
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.probes.mcp_waits", description=__doc__.splitlines()[0])
    parser.add_argument("--waiters", type=int, default=200)
    parser.add_argument("--probes", type=int, default=200)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.waiters, args.probes), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
