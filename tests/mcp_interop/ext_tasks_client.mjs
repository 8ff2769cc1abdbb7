// The official @modelcontextprotocol/client (v2, protocol 2026-07-28) with
// @modelcontextprotocol/ext-tasks against `offload mcp`: delegate_task runs as a task of the
// tasks extension, settles `completed` with the tool's result, and a cancelled one `cancelled`.
// usage: node ext_tasks_client.mjs (--stdio COMMAND ARGS... | --http URL [--token T])
// Prints one JSON line of what it saw; exits 1 on the first check that fails.
import { Client, StreamableHTTPClientTransport, ProtocolError } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";
import { check, done, seen } from "./report.mjs";

const argv = process.argv.slice(2);
const token = argv.includes("--token") ? argv[argv.indexOf("--token") + 1] : undefined;
const clientInfo = { name: "ext-tasks-interop", version: "2.4.0" };
const clientCapabilities = {};
const anyJson = { "~standard": { version: 1, vendor: "offload-interop", validate: (value) => ({ value }) } };

function transport() {
  if (argv[0] === "--stdio") return new StdioClientTransport({ command: argv[1], args: argv.slice(2), env: process.env, stderr: "inherit" });
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  return new StreamableHTTPClientTransport(new URL(argv[1]), { requestInit: { headers } });
}

const client = new Client(clientInfo, { capabilities: clientCapabilities, versionNegotiation: { mode: { pin: "2026-07-28" } } });
await client.connect(transport());
seen.protocol = client.getNegotiatedProtocolVersion() ?? null;
seen.era = client.getProtocolEra() ?? null;
check(seen.era === "modern", "2026-07-28 negotiated", seen);

// The raw request path the extension needs on 2026-07-28 (its "host request coordinator"): the
// framed request through the client's own coordinator (request ids, response matching), with a
// codec that hands the result back undecoded -- the client's codec would refuse
// `resultType: "task"`, which is the extension's to read. (The v2 client has no public raw path.)
function rawCodec(method) {
  const codec = client._resolveOutboundCodec(method);
  return Object.create(codec, { decodeResult: { value: (_method, raw) => ({ kind: "complete", result: raw }) } });
}

async function rawDispatch(request, options = {}) {
  try {
    const result = await client._requestWithSchemaViaCodec(rawCodec(request.method), request, anyJson,
      { signal: options.signal, timeout: 120000 });
    return { kind: "result", result };
  } catch (error) {
    if (error instanceof ProtocolError) return { kind: "error", error: { code: error.code, message: error.message, ...(error.data === undefined ? {} : { data: error.data }) } };
    throw error;
  }
}

const session = createTaskSessionFromClient(client, {
  endpointId: "offload-interop",
  rawDispatch,
  v2RequestFraming: { protocolVersion: seen.protocol, clientInfo, clientCapabilities },
});
try {
  const execution = await session.callTool("delegate_task", { goal: "interop ext-tasks call" });
  const { outcome } = await execution.settle();
  seen.completed = outcome.status;
  check(outcome.status === "completed", "a completed delegation settles completed", outcome);
  check(outcome.result?.structuredContent?.state === "completed", "its result inline", outcome.result);

  const held = await session.callTool("delegate_task", { goal: "HOLD interop cancel" });
  await held.cancel();
  const cancelled = await held.settle();
  seen.cancelled = cancelled.outcome.status;
  check(cancelled.outcome.status === "cancelled", "a cancelled delegation settles cancelled", cancelled.outcome);
} finally {
  await session.close();
  await client.close();
}
done();
