"""docs/mcp.md's client configurations work as written (issue 43 point 6): every JSON and TOML
block with an MCP server entry, and every ``claude mcp add`` line, is parsed, its placeholder
paths (``/home/you/...``) are replaced by real ones, and the server it describes is started and
listed by the SDK's client: a stdio entry with its own ``command``, ``args`` and ``env`` (the key
placeholder stays: nothing here calls a model), an HTTP entry against ``offload mcp --http``
with the entry's own ``Authorization`` header."""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.mcp_server.mcp_support import OFFLOAD, HttpServer, http_client

pytestmark = pytest.mark.timeout(120)
PAGE = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"
FENCE = re.compile(r"^```(json|toml|bash)\n(.*?)^```", re.S | re.M)
TOOLS = {"delegate_task", "delegation_status", "delegation_result", "list_delegations", "stop_delegation"}


def _entries() -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for number, (language, text) in enumerate(FENCE.findall(PAGE.read_text(encoding="utf-8"))):
        if language == "json" and "mcpServers" in text:
            found += [(f"json{number}", e) for e in json.loads(text)["mcpServers"].values()]
        elif language == "toml" and "mcp_servers" in text:
            found += [(f"toml{number}", e) for e in tomllib.loads(text)["mcp_servers"].values()]
        elif language == "bash" and text.startswith("claude mcp add"):
            found.append((f"claude{number}", _claude_add(shlex.split(text))))
    return found


def _claude_add(argv: list[str]) -> dict[str, Any]:
    """A ``claude mcp add`` line as the entry it writes."""
    if "--transport" in argv:
        header = argv[argv.index("--header") + 1].split(": ", 1)
        return {"type": argv[argv.index("--transport") + 1], "url": argv[argv.index("--transport") + 3],
                "headers": {header[0]: header[1]}}
    command = argv[argv.index("--") + 1:]
    env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
    return {"command": command[0], "args": command[1:], "env": env}


ENTRIES = _entries()


def test_the_page_configures_every_client_the_issue_names():
    text = PAGE.read_text(encoding="utf-8")
    for client in ("Claude Desktop", "Cursor", "Claude Code", "Codex", "claude_desktop_config.json"):
        assert client in text
    kinds = {("url" if "url" in e else "stdio") for _, e in ENTRIES}
    assert kinds == {"url", "stdio"} and len(ENTRIES) >= 6, ENTRIES


def _real(value: str, tmp_path: Path) -> str:
    return (value.replace("/home/you/offload/.venv/bin/offload", OFFLOAD)
            .replace("/home/you/project", str(tmp_path / "project")).replace("/home/you/.hermes", str(tmp_path / "home")))


@pytest.mark.parametrize("name,entry", [e for e in ENTRIES if "command" in e[1]], ids=lambda v: v if isinstance(v, str) else "")
def test_a_stdio_configuration_starts_the_server_with_its_env(tmp_path, name, entry):
    from mcp import Client, StdioServerParameters

    (tmp_path / "project").mkdir()
    assert "--workspace" in entry["args"] and {"OPENAI_API_KEY", "HERMES_HOME"} <= set(entry["env"]), entry
    env = {"PATH": os.environ.get("PATH", ""), **{k: _real(v, tmp_path) for k, v in entry["env"].items()}}
    params = StdioServerParameters(command=_real(entry["command"], tmp_path),
                                   args=[_real(a, tmp_path) for a in entry["args"]], env=env, cwd="/")

    async def body():
        async with Client(params, read_timeout_seconds=60) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            listed = await client.call_tool("list_delegations", {})
            assert not listed.is_error, listed
            # The key in the entry's env reached the server: no "no API key" refusal (the goal is
            # refused later, as a placeholder, before any model is called).
            refused = (await client.call_tool("delegate_task", {"goal": "TODO"})).content[0].text
            assert "no API key" not in refused and "--workspace" not in refused and "placeholder" in refused.lower()
    anyio.run(body)


@pytest.mark.parametrize("name,entry", [e for e in ENTRIES if "url" in e[1]], ids=lambda v: v if isinstance(v, str) else "")
def test_an_http_configuration_reaches_the_server_with_its_header(tmp_path, name, entry):
    scheme, placeholder = entry["headers"]["Authorization"].split(" ", 1)
    assert scheme == "Bearer" and placeholder in ("TOKEN", "$(offload token add claude-code)") and entry["url"].endswith("/mcp")
    from offload.access.tokens import TokenStore

    token = TokenStore(tmp_path).add("claude-code")  # what `offload token add claude-code` prints
    server = HttpServer(tmp_path, "--workspace", str(tmp_path))
    try:
        async def body():
            async with http_client(server.url, token) as client:
                assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        anyio.run(body)
    finally:
        server.stop()
