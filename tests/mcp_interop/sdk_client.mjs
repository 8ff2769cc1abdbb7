// The TypeScript SDK's client (@modelcontextprotocol/sdk, protocol 2025-11-25) against `offload mcp`.
// usage: node sdk_client.mjs (--stdio COMMAND ARGS... | --http URL [--token T]) [--tasks]
// Prints one JSON line of what it saw; exits 1 on the first check that fails.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { check, done, seen } from "./report.mjs";

const argv = process.argv.slice(2);
const tasks = argv.includes("--tasks");
const token = argv.includes("--token") ? argv[argv.indexOf("--token") + 1] : undefined;

function transport() {
  if (argv[0] === "--stdio") {
    const rest = argv.slice(1).filter((a) => a !== "--tasks");
    return new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: process.env, stderr: "inherit" });
  }
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  return new StreamableHTTPClientTransport(new URL(argv[1]), { requestInit: { headers } });
}

const client = new Client({ name: "ts-sdk-interop", version: "1.32.2" }, { capabilities: {} });
const wire = transport();
const setVersion = wire.setProtocolVersion?.bind(wire);
wire.setProtocolVersion = (version) => { seen.protocol = version; setVersion?.(version); };
await client.connect(wire);
const caps = client.getServerCapabilities();
const { tools } = await client.listTools();
seen.tools = tools.map((t) => t.name).sort();
const delegate = tools.find((t) => t.name === "delegate_task");
check(delegate !== undefined, "delegate_task listed", seen.tools);

async function plain() {
  const handle = await client.callTool({ name: "delegate_task", arguments: { goal: "interop plain call" } });
  check(!handle.isError && handle.structuredContent?.status === "dispatched", "plain dispatch", handle);
  const id = handle.structuredContent.delegation_id;
  const result = await client.callTool({ name: "delegation_result", arguments: { delegation_id: id, wait_s: 60 } },
    undefined, { timeout: 120000 });
  check(result.structuredContent?.state === "completed", "plain result completed", result.structuredContent);
  const status = await client.callTool({ name: "delegation_status", arguments: { delegation_id: id } });
  check(status.structuredContent?.delivered === true, "result acknowledged", status.structuredContent);
}

async function withTasks() {
  check(caps?.tasks?.requests?.tools?.call !== undefined, "tasks capability on 2025-11-25", caps);
  check(delegate.execution?.taskSupport === "optional", "delegate_task taskSupport optional", delegate);
  const kinds = [];
  let taskId = null;
  let final = null;
  const stream = client.experimental.tasks.callToolStream(
    { name: "delegate_task", arguments: { goal: "interop task call" } }, undefined, { task: {}, timeout: 120000 });
  for await (const message of stream) {
    kinds.push(message.type);
    if (message.type === "taskCreated") taskId = message.task.taskId;
    if (message.type === "result") final = message.result;
    if (message.type === "error") check(false, "task stream without error", String(message.error));
  }
  seen.task_messages = kinds;
  check(taskId !== null && taskId.startsWith("deleg_"), "CreateTaskResult with the delegation id", kinds);
  check(final?.structuredContent?.state === "completed", "tasks/result completed", final);
  const task = await client.experimental.tasks.getTask(taskId);
  check(task.status === "completed", "tasks/get completed", task);
  const listed = await client.experimental.tasks.listTasks();
  check(listed.tasks.some((t) => t.taskId === taskId), "tasks/list lists it", listed);
}

try {
  await (tasks ? withTasks() : plain());
} finally {
  await client.close();
}
done();
