"""Driving ``offload mcp`` as a subprocess with the SDK's own ``Client`` over stdio, against a
loopback scripted model whose "HOLD" goals wait for the test's gate."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, AsyncIterator

from mcp import Client, StdioServerParameters
from mcp_types import Implementation

from offload.testing.model_server import ScriptedModelServer, last_message_text, text_reply

OFFLOAD = str(Path(sys.executable).with_name("offload"))
HOLD = "HOLD"  # a goal with this word is answered only once the gate is open
GATE_TIMEOUT_S = 60.0


class GatedModel:
    """The children's model: answers at once, except goals saying HOLD, which wait for ``gate``."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.server = ScriptedModelServer(self.script)

    def script(self, request: dict[str, Any]):
        text = " ".join(str(m.get("content")) for m in request.get("messages") or [])
        if HOLD in text:
            self.gate.wait(GATE_TIMEOUT_S)
        return text_reply(f"finished: {last_message_text(request)[:40]}")


def server_env(home: Path, model: GatedModel | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_BASE")}
    env["HERMES_HOME"] = str(home)
    if model is not None:
        env.update(OFFLOAD_BASE_URL=model.server.url, OFFLOAD_MODEL="demo-model")
    return env


@contextlib.asynccontextmanager
async def mcp_client(home: Path, *args: str, model: GatedModel | None = None, name: str = "pytest-client",
                     cwd: Path | None = None, tolerate_exit: bool = False,
                     extensions: list[Any] | None = None, env: dict[str, str] | None = None,
                     **client_options: Any) -> AsyncIterator[Client]:
    """A ``Client`` on a fresh ``offload mcp ARGS`` over stdio; ``tolerate_exit``: the test
    kills the server, so the connection's teardown errors are expected; ``env``: the server's
    whole environment (default: ``server_env``)."""
    params = StdioServerParameters(command=OFFLOAD, args=["mcp", *args], env=env or server_env(home, model),
                                   cwd=str(cwd or home))
    client = Client(params, client_info=Implementation(name=name, version="1"), read_timeout_seconds=60,
                    extensions=extensions, **client_options)
    try:
        async with client:
            yield client
    except BaseException as exc:  # an ExceptionGroup from the transport's task group
        if not tolerate_exit or isinstance(exc, (KeyboardInterrupt, AssertionError)):
            raise


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """The tool's result; fails the test on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result


async def tool_error(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result
    return result.content[0].text


class HttpServer:
    """``offload mcp --http --port 0 ARGS`` as a subprocess; ``url`` once it listens."""

    START_TIMEOUT_S = 30.0

    def __init__(self, home: Path, *args: str, model: GatedModel | None = None) -> None:
        self.proc = subprocess.Popen([OFFLOAD, "mcp", "--http", "--port", "0", *args], env=server_env(home, model),
                                     cwd=str(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.seen: list[str] = []
        self.url = self._await_url()
        from offload.access.tokens import TokenStore

        self.token = TokenStore(home).get()  # the home's operator token, which the server accepts

    @property
    def banner(self) -> str:
        """What it printed on stderr up to its start line."""
        return "".join(self.seen)

    def _await_url(self) -> str:
        seen = self.seen
        timer = threading.Timer(self.START_TIMEOUT_S, self.proc.kill)  # a hung start ends the read below
        timer.start()
        try:
            for line in self.proc.stderr:
                seen.append(line)
                if line.startswith("offload mcp on "):
                    return line.split()[3]
        finally:
            timer.cancel()
        raise AssertionError(f"offload mcp --http did not start: {''.join(seen)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()
        self.proc.stderr.close()


def http_client(url: str, token: str | None, name: str = "pytest-client", **client_options: Any) -> Client:
    """The SDK's client over Streamable HTTP, with the bearer token; ``client_options`` go to
    ``Client`` (extensions, callbacks)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60))
    return Client(transport, client_info=Implementation(name=name, version="1"), read_timeout_seconds=60,
                  **client_options)
