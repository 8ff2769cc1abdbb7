"""An MCP client's trace continues into offload (issue 42, item 6): the W3C trace context a client
puts in the ``tools/call`` request's ``_meta`` (``traceparent``, as the MCP spec reserves it,
SEP-414) is the parent of the delegation's dispatch span, so the unit spans join the client's
trace instead of starting their own, seen by a loopback OTLP receiver. The MCP SDK's server
middleware extracts it (a non-recording span in the context, since offload's tracer provider is
not the global one) and the tool's worker thread inherits that context: this test keeps it so."""
from __future__ import annotations

import secrets

import anyio
import pytest

from tests.mcp_server.mcp_support import call, mcp_client

pytestmark = pytest.mark.timeout(120)


def test_a_delegate_task_call_with_a_traceparent_joins_the_clients_trace(tmp_path, receiver, monkeypatch):
    for name, value in receiver.env(OTEL_SERVICE_NAME="offload-mcp").items():
        monkeypatch.setenv(name, value)  # the server's environment is this one's
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)

    async def body() -> str:
        async with mcp_client(tmp_path, "--demo-model") as client:
            result = await client.call_tool("delegate_task", {"goal": "count the files in the workspace"},
                                            meta={"traceparent": f"00-{trace_id}-{client_span}-01"})
            assert not result.is_error, result.content[0].text
            delegation_id = result.structured_content["delegation_id"]
            await call(client, "delegation_result", delegation_id=delegation_id, wait_s=60)
            return delegation_id
    delegation_id = anyio.run(body)

    spans = receiver.wait_for(lambda got: any(s.name == "offload.delegation" for s in got))
    (dispatch,) = [s for s in spans if s.name == "offload.delegation.dispatch"]
    (unit,) = [s for s in spans if s.name == "offload.delegation"]
    assert (dispatch.trace_id, dispatch.parent_id) == (trace_id, client_span)  # under the client's span
    assert unit.trace_id == trace_id and unit.parent_id == dispatch.span_id
    assert unit.attributes["offload.delegation_id"] == delegation_id
