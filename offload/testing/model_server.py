"""A scripted, loopback, OpenAI-compatible HTTP server for demos, end-to-end tests and benchmarks.

This is NOT a model. It answers ``POST /v1/chat/completions`` (streaming SSE and plain JSON)
and ``GET /v1/models`` exactly as the OpenAI API would, but every answer comes from a *script*:
``script(request: dict) -> Reply`` (see ``offload/model_server_script.py``). Every response's
``model`` field echoes the requested id, and ``/v1/models`` lists its ids as owned by
"offload-demo (scripted, not a real model)", so nobody mistakes its output for a model's.

Owns: the HTTP server (stdlib ``ThreadingHTTPServer``, one daemon thread per connection, HTTP/1.1
keep-alive, chunked SSE), the request log, and shutdown.

Invariants:

* It binds to loopback only (127.0.0.1 by default, port 0 = any free port).
* ``stop()`` returns promptly even while replies hang or wait out a delay: those wait on the
  server's stop event, and every open connection is shut down so no handler stays blocked.
* A failing script answers 500 with the error in the body; it never kills the server.
* Requests for a model id not in ``model_ids`` get OpenAI's 404 ``model_not_found`` before the
  script runs; pass ``model_ids=None`` to let the script answer every model id.
"""
from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

from offload.testing import wire
from offload.testing.replies import (  # re-exported: the server's public API
    DEFAULT_TEXT,
    Reply,
    Script,
    ToolCallSpec,
    error_reply,
    hang_reply,
    last_message_text,
    rule_script,
    sequence_script,
    text_reply,
    tool_call_reply,
)

__all__ = [
    "DEFAULT_TEXT", "Reply", "Script", "ScriptedModelServer", "ToolCallSpec", "error_reply", "hang_reply",
    "last_message_text", "rule_script", "sequence_script", "text_reply", "tool_call_reply",
]

_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_SHUTDOWN_POLL_S = 0.05  # serve_forever's poll interval bounds how long stop() waits for the loop
_HANDLER_EXIT_S = 1.0  # stop() waits at most this for woken handlers; they are daemons anyway


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a hanging handler must never keep the process alive
    # socketserver's default backlog of 5 overflows when a fan-out of 50 children connects at
    # once; the dropped connects come back only after TCP and client retries (seconds).
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], owner: ScriptedModelServer) -> None:
        self.owner = owner
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.owner._track(request, open_=True)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.owner._track(request, open_=False)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that vanished mid-request (killed, interrupted, timed out) resets its
        # connection; that is routine here, not a server fault worth a traceback on stderr.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the openai SDK's connection pool expects
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and the demo read ScriptedModelServer.requests instead

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        owner = self.server.owner
        if not self._authorized():
            return
        if path == "/v1/models":
            self._send_json(200, wire.models_list(owner.model_ids or ()))
        elif path.startswith("/v1/models/"):
            model = path[len("/v1/models/") :]
            if owner.model_ids is None or model in owner.model_ids:
                self._send_json(200, wire.model_entry(model))
            else:
                self._send_json(404, wire.model_not_found(model))
        else:
            self._send_json(404, wire.error_body(404, f"Unknown path {self.path}; this server has /v1/chat/completions and /v1/models."))

    def do_POST(self) -> None:
        try:
            self._chat_completion()
        except OSError:
            self.close_connection = True  # the client went away (or stop() cut it): nothing to answer

    def _chat_completion(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/chat/completions":
            self._read_body()
            self._send_json(404, wire.error_body(404, f"Unknown path {self.path}; POST /v1/chat/completions."))
            return
        request = self._parse_request()
        if request is None or not self._authorized():
            return
        owner = self.server.owner
        owner._record(request)
        model = request.get("model")
        if not isinstance(model, str) or not model:
            self._send_json(400, wire.error_body(400, "you must provide a model parameter"))
            return
        if owner.model_ids is not None and model not in owner.model_ids:
            self._send_json(404, wire.model_not_found(model))
            return
        reply = owner._run_script(request)
        if reply.delay_s and owner.stop_event.wait(reply.delay_s):
            self.close_connection = True
            return
        if reply.is_error:
            self._send_error_reply(reply)
        elif request.get("stream"):
            self._stream(request, reply)
        else:
            self._complete(request, reply)

    # --- request side --------------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _parse_request(self) -> dict[str, Any] | None:
        try:
            request = json.loads(self._read_body() or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            self._send_json(400, wire.error_body(400, f"The request body is not valid JSON: {exc}"))
            return None
        if not isinstance(request, dict):
            self._send_json(400, wire.error_body(400, "The request body must be a JSON object."))
            return None
        return request

    def _authorized(self) -> bool:
        api_key = self.server.owner.api_key
        if api_key is None or self.headers.get("Authorization") == f"Bearer {api_key}":
            return True
        self._send_json(401, wire.error_body(401, "Incorrect API key provided (scripted demo server)."))
        return False

    # --- response side -------------------------------------------------------------------

    def _send_json(self, status: int, payload: dict[str, Any], headers: Sequence[tuple[str, str]] = ()) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_error_reply(self, reply: Reply) -> None:
        headers: list[tuple[str, str]] = []
        if reply.retry_after_s is not None:
            headers.append(("Retry-After", f"{reply.retry_after_s:g}"))
            headers.append(("retry-after-ms", str(int(reply.retry_after_s * 1000))))
        body = wire.error_body(reply.status, reply.error_message, reply.error_type, reply.error_code)
        self._send_json(reply.status, body, headers)

    def _complete(self, request: dict[str, Any], reply: Reply) -> None:
        completion_id, call_ids = self.server.owner._new_ids(len(reply.tool_calls))
        if reply.hang:
            self._start_chunked("application/json")
            self._hang()
            return
        self._send_json(200, wire.chat_completion(request, reply, completion_id, int(time.time()), call_ids),
                        reply.headers)

    def _stream(self, request: dict[str, Any], reply: Reply) -> None:
        completion_id, call_ids = self.server.owner._new_ids(len(reply.tool_calls))
        self._start_chunked("text/event-stream; charset=utf-8", reply.headers)
        stop_event = self.server.owner.stop_event
        chunks = wire.stream_chunks(request, reply, completion_id, int(time.time()), call_ids)
        for index, chunk in enumerate(chunks):
            if index and reply.chunk_delay_s and stop_event.wait(reply.chunk_delay_s):
                self.close_connection = True
                return
            self._write_chunk(wire.sse(chunk))
        if reply.hang:
            self._hang()
            return
        self._write_chunk(wire.sse("[DONE]"))
        self.wfile.write(b"0\r\n\r\n")  # end of the chunked body

    def _start_chunked(self, content_type: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _hang(self) -> None:
        # Never finish the body; once the server stops, drop the connection mid-response.
        self.server.owner.stop_event.wait()
        self.close_connection = True


class ScriptedModelServer:
    """A running scripted OpenAI-compatible server on loopback; see the module docstring.

    Use as a context manager, or ``start()`` / ``stop()``. ``url`` is the base URL for an
    OpenAI client (``http://127.0.0.1:<port>/v1``); ``requests`` is a snapshot of every
    chat-completions request body received, in arrival order.
    """

    def __init__(
        self,
        script: Script,
        model_ids: Sequence[str] | None = ("demo-model",),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
    ) -> None:
        if host not in _LOOPBACK_HOSTS:
            raise ValueError(f"ScriptedModelServer binds to loopback only; host must be one of {_LOOPBACK_HOSTS}, got {host!r}")
        self.script = script
        self.model_ids: tuple[str, ...] | None = None if model_ids is None else tuple(model_ids)
        self.host = host
        self.port = port
        self.api_key = api_key
        self.stop_event = threading.Event()
        self._requests: list[dict[str, Any]] = []
        self._requests_changed = threading.Condition()
        self._connections: set[socket.socket] = set()
        self._connections_changed = threading.Condition()
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        if self._httpd is not None or self.stop_event.is_set():
            raise RuntimeError("a ScriptedModelServer starts once; create a new one to serve again")
        self._httpd = _HTTPServer((self.host, self.port), self)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": _SHUTDOWN_POLL_S},
            name=f"scripted-model-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; wakes hanging/delayed replies and closes every open connection."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.stop_event.set()
        httpd.shutdown()
        with self._connections_changed:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)  # unblocks a handler waiting on keep-alive
            except OSError:
                pass
        httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        with self._connections_changed:  # handlers are woken above; give them a moment to finish
            self._connections_changed.wait_for(lambda: not self._connections, timeout=_HANDLER_EXIT_S)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None and not self.port:
            raise RuntimeError("ScriptedModelServer.url is known only after start()")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    # --- request log ------------------------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """Connections whose handler has not finished; 0 after a clean ``stop()``."""
        with self._connections_changed:
            return len(self._connections)

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._requests_changed:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout_s: float) -> bool:
        """Block until at least ``count`` chat requests have arrived; False on timeout."""
        with self._requests_changed:
            return self._requests_changed.wait_for(lambda: len(self._requests) >= count, timeout=timeout_s)

    # --- used by the handler ------------------------------------------------------------------

    def _record(self, request: dict[str, Any]) -> None:
        with self._requests_changed:
            self._requests.append(request)
            self._requests_changed.notify_all()

    def _run_script(self, request: dict[str, Any]) -> Reply:
        try:
            reply = self.script(request)
            if not isinstance(reply, Reply):
                raise TypeError(f"the script returned {type(reply).__name__}, not a Reply")
            return reply
        except Exception as exc:  # a broken script is reported to the client, not fatal
            return error_reply(500, f"scripted model server: the script failed: {type(exc).__name__}: {exc}")

    def _new_ids(self, tool_calls: int) -> tuple[str, list[str]]:
        with self._ids_lock:
            completion = next(self._ids)
            calls = [next(self._ids) for _ in range(tool_calls)]
        return f"chatcmpl-scripted-{completion}", [f"call_scripted_{n}" for n in calls]

    def _track(self, connection: socket.socket, open_: bool) -> None:
        with self._connections_changed:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)
                self._connections_changed.notify_all()
