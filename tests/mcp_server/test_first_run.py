"""A first run from a desktop client (issue 43 point 6): started with a minimal environment (no
API key) the server still starts, and delegate_task answers one line naming where the key goes,
with no traceback in its log; started in ``/`` with no --workspace and no client root, it refuses
to let subagents work there and names --workspace, while an explicit --workspace works."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest

from tests.mcp_server.mcp_support import OFFLOAD, call, mcp_client, tool_error

pytestmark = pytest.mark.timeout(120)


def _minimal_env(home: Path) -> dict[str, str]:
    """What Claude Desktop passes: PATH and little else (no key, no OFFLOAD_* settings)."""
    return {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", str(home)), "HERMES_HOME": str(home)}


def test_without_an_api_key_delegate_task_names_the_client_s_env_and_nothing_crashes(tmp_path):
    async def body():
        async with mcp_client(tmp_path, "--workspace", str(tmp_path), env=_minimal_env(tmp_path)) as client:
            refusal = await tool_error(client, "delegate_task", goal="look around")
            assert "no API key" in refusal and "OPENAI_API_KEY" in refusal and '"env"' in refusal, refusal
            assert "retry" not in refusal and "\n" not in refusal
            assert (await call(client, "list_delegations")).structured_content == {"delegations": []}
    anyio.run(body)
    started = subprocess.run([OFFLOAD, "mcp", "--workspace", str(tmp_path)], env=_minimal_env(tmp_path),
                             input="", capture_output=True, text=True, timeout=60)
    assert "no API key" in started.stderr and "Traceback" not in started.stderr, started.stderr


def test_a_server_started_in_the_root_refuses_until_workspace_names_the_project(tmp_path, model):
    async def body():
        async with mcp_client(tmp_path, model=model, cwd=Path("/")) as client:
            refusal = await tool_error(client, "delegate_task", goal="list the files")
            assert "started in /" in refusal and "--workspace" in refusal, refusal
        async with mcp_client(tmp_path, "--workspace", str(tmp_path), model=model, cwd=Path("/")) as client:
            handle = (await call(client, "delegate_task", goal="list the files")).structured_content
            assert handle["status"] == "dispatched"
    anyio.run(body)
