#!/usr/bin/env bash
# The engine, restore, chaos, Python API and MCP server suites again on the PostgreSQL ledger (kill fuzzing
# included, bounded trial count), so every engine and API promise is checked on the shared backend too.
set -euo pipefail
: "${OFFLOAD_TEST_POSTGRES_DSN:?is not set: .ci/services.d/20-postgres.sh starts the server}"
OFFLOAD_TEST_LEDGER=postgresql .venv/bin/python -m pytest -q tests/engine tests/restore tests/chaos tests/api tests/mcp_server
