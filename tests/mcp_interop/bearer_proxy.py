"""A loopback TCP proxy that adds ``Authorization: Bearer TOKEN`` to every HTTP/1.1 request on
its way to ``offload mcp --http``, for a client that cannot send one: the conformance suite
(``@modelcontextprotocol/conformance`` 0.1.16 has no option for a header), while offload's server
requires a token on loopback too (issue 40).

Everything else passes byte for byte, both ways: the client's ``Host`` and ``Origin`` (so the
DNS-rebinding scenario still meets offload's own checks), the request bodies, and the responses,
SSE streams included. Requests are framed by ``Content-Length``; a chunked request body is
refused (no client of these tests sends one), so a request is never forwarded half-read.
"""
from __future__ import annotations

import asyncio
import socket
import threading

_HEADERS_END = b"\r\n\r\n"


class BearerProxy:
    """``with BearerProxy(port, token) as proxy:`` serves ``proxy.url_for(path)`` on 127.0.0.1."""

    def __init__(self, upstream_port: int, token: str) -> None:
        self.upstream_port, self.header = upstream_port, f"Authorization: Bearer {token}\r\n".encode()
        self.loop = asyncio.new_event_loop()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, name="bearer-proxy", daemon=True)

    def url_for(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> "BearerProxy":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(asyncio.start_server(self._serve, sock=self.sock), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        back = asyncio.ensure_future(_pipe(server_in, client_out))
        try:
            while await self._forward_request(client_in, server_out):
                pass
        finally:
            server_out.close()
            await back

    async def _forward_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(_HEADERS_END)
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        request_line, _, rest = head.partition(b"\r\n")
        fields = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
                  for line in rest.split(b"\r\n") if b":" in line}
        if b"chunked" in fields.get(b"transfer-encoding", b""):
            raise ValueError("bearer_proxy: a chunked request body is not forwarded")
        body = await reader.readexactly(int(fields.get(b"content-length", b"0")))
        writer.write(request_line + b"\r\n" + self.header + rest + body)
        await writer.drain()
        return True


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
