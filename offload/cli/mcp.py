"""``offload mcp``: serve durable background subagents to an MCP client (Claude Code, Codex,
Cursor, any client of the protocol), over stdio (default) or Streamable HTTP.

Invariant: in stdio mode stdout carries nothing but the protocol; every message of ours (the
demo model's label, logs, errors) goes to stderr.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer

from offload.errors import CliError

PARENT_SESSION = "mcp-server"  # the never-run parent agent whose endpoint and toolsets children inherit


def mcp(demo_model: bool = typer.Option(False, "--demo-model", help="children talk to the scripted offline demo "
                                        "server (canned answers, not a real model)"),
        namespace: Optional[str] = typer.Option(None, "--namespace", metavar="NAME",
                                                help="the namespace of every client of this server (default: the "
                                                     "client's name and this directory)"),
        all_namespaces: bool = typer.Option(False, "--all-namespaces", help="operator view: read and stop the "
                                            "delegations of every namespace (cannot start any)"),
        workspace: Optional[Path] = typer.Option(None, "--workspace", metavar="DIR",
                                                 help="where children work (default: workspace in config.yaml, "
                                                      "else this directory)"),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="log progress to stderr")) -> None:
    """MCP server over stdio: delegate_task, delegation_status, delegation_result,
    list_delegations and stop_delegation, with every delegation in the ledger of this home.

    Claude Code: claude mcp add offload -- offload mcp (see docs/mcp.md)."""
    try:
        from offload.mcp_server.server import Tools, build_server
    except ImportError as exc:
        raise CliError(f"offload mcp needs the MCP SDK ({exc.name} is missing): pip install 'offload[mcp]'") from None
    from offload.cli.views import Ui, make_console
    from offload.config import load_config
    from offload.mcp_server.delegations import McpDelegations
    from offload.runtime import Offload

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="offload mcp: %(levelname)s: %(message)s", force=True)
    if namespace is not None and all_namespaces:
        raise CliError("--namespace and --all-namespaces exclude each other; pass one")
    cfg = load_config()
    if demo_model:
        from offload.cli.demo_model import start_demo_endpoint

        stderr_ui = Ui(console=make_console(stderr=True), err_console=make_console(stderr=True))
        cfg = cfg.model_copy(update=start_demo_endpoint(stderr_ui))
    if workspace is not None:
        cfg = cfg.model_copy(update={"workspace": str(workspace)})
    with Offload(cfg) as off:
        service = McpDelegations(off, off.build_agent(PARENT_SESSION))
        build_server(Tools(service, namespace, all_namespaces)).run()
