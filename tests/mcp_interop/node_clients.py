"""Running the Node MCP clients of this folder (pinned in package.json / package-lock.json)
against ``offload mcp``: where they are (``OFFLOAD_TEST_NODE_MCP_CLIENTS``, set by
``.ci/services.d/45-node-mcp-clients.sh``), and one client run as a subprocess whose last
stdout line is its JSON report. Missing clients skip the test, naming the command that
installs them, except under ``CI=true``, where they fail it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
INSTALL = "source .ci/services.d/45-node-mcp-clients.sh  (npm ci in tests/mcp_interop, Node >= 22)"
RUN_TIMEOUT_S = 180


def clients_dir() -> Path:
    folder = os.environ.get("OFFLOAD_TEST_NODE_MCP_CLIENTS")
    node = os.environ.get("OFFLOAD_TEST_NODE") or shutil.which("node")
    if folder and node and (Path(folder) / "node_modules" / "@modelcontextprotocol").is_dir():
        return Path(folder)
    message = f"the Node MCP clients are not installed (OFFLOAD_TEST_NODE_MCP_CLIENTS unset or empty): {INSTALL}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


def node() -> str:
    return os.environ.get("OFFLOAD_TEST_NODE") or shutil.which("node") or "node"


def run_node(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    folder = clients_dir()
    return subprocess.run([node(), str(folder / script), *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)


def run_client(script: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script`` with ``args``; its JSON report (the test fails with it when it failed)."""
    proc = run_node(script, *args, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {}
    assert proc.returncode == 0 and report.get("ok"), (f"{script} {' '.join(args)} failed (exit {proc.returncode}): "
                                                       f"{report or proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return report
