"""``offload mcp``: serve durable background subagents to an MCP client (Claude Code, Codex,
Cursor, any client of the protocol), over stdio (default) or Streamable HTTP (``--http``).

Invariant: in stdio mode stdout carries nothing but the protocol; every message of ours (the
demo model's label, logs, errors) goes to stderr.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer

from offload.errors import CliError, install_extra

PARENT_SESSION = "mcp-server"  # the never-run parent agent whose endpoint and toolsets children inherit


def mcp(demo_model: bool = typer.Option(False, "--demo-model", help="children talk to the scripted offline demo "
                                        "server (canned answers, not a real model)"),
        namespace: Optional[str] = typer.Option(None, "--namespace", metavar="NAME",
                                                help="stdio: the namespace of every client (default: the client's "
                                                     "name and this directory); HTTP: the operator token's (named "
                                                     "tokens keep their own)"),
        all_namespaces: bool = typer.Option(False, "--all-namespaces", help="operator view: read and stop the "
                                            "delegations of every namespace (cannot start any)"),
        workspace: Optional[Path] = typer.Option(None, "--workspace", metavar="DIR",
                                                 help="where children work (default: the client's first root, "
                                                      "else workspace in config.yaml, else this directory)"),
        http: bool = typer.Option(False, "--http", help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio"),
        host: str = typer.Option("127.0.0.1", "--host", help="--http: address to bind (default: loopback only)"),
        port: int = typer.Option(8766, "--port", min=0, max=65535, help="--http: port to listen on (0: any free one)"),
        token: Optional[str] = typer.Option(None, "--token", help="--http, deprecated (visible in ps): use "
                                            "$OFFLOAD_MCP_TOKEN or the token store (`offload token show`)"),
        allow_host: list[str] = typer.Option([], "--allow-host", metavar="NAME",
                                             help="--http: also answer to this host name (repeatable)"),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="log progress to stderr")) -> None:
    """MCP server over stdio (or Streamable HTTP with --http): delegate_task, delegation_status, delegation_result,
    list_delegations and stop_delegation, with every delegation in the ledger of this home.

    Claude Code: claude mcp add offload -- offload mcp (see docs/mcp.md)."""
    _check_sdk()
    from offload.cli.views import Ui, make_console
    from offload.config import load_config
    from offload.mcp_server.delegations import McpDelegations
    from offload.runtime import Offload

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="offload mcp: %(levelname)s: %(message)s", force=True)
    if namespace is not None and all_namespaces:
        raise CliError("--namespace and --all-namespaces exclude each other; pass one")
    if http:  # the token first: a refused one leaves nothing behind
        from offload.access import tokens as token_store
        from offload.home import get_hermes_home
        from offload.mcp_server.http import ENV_TOKEN, token_verifier

        fixed, source = token_store.resolve(get_hermes_home(), env_var=ENV_TOKEN, flag=token)
        verify = token_verifier(get_hermes_home(), fixed)
    cfg = load_config()
    if demo_model:
        from offload.cli.demo_model import start_demo_endpoint

        stderr_ui = Ui(console=make_console(stderr=True), err_console=make_console(stderr=True))
        cfg = cfg.model_copy(update=start_demo_endpoint(stderr_ui))
    if workspace is not None:
        cfg = cfg.model_copy(update={"workspace": str(workspace)})
    from offload.mcp_server.first_run import FirstRun

    first_run = FirstRun.check(cfg, workspace is not None)
    for problem in (first_run.key, first_run.cwd):
        if problem:
            logging.getLogger("offload.mcp").warning("%s", problem)  # one line; delegate_task answers the same
    with Offload(cfg) as off:
        def build_parent(root: Path | None) -> object:
            return off.build_agent(PARENT_SESSION, config=cfg.model_copy(update={"workspace": str(root)}) if root else None)

        service = McpDelegations(off, build_parent)  # dead owners' units resume from here on
        # The SDK's import (1-2 s on a busy machine) comes after the recovery above, so a
        # resumed child does not wait for it (issue 44: resume within 2 s of the start).
        from offload.mcp_server.server import Tools, build_server

        server = build_server(Tools(service, namespace, all_namespaces, use_roots=workspace is None,
                                    first_run=first_run))
        from offload.owner import handover
        from offload.owner.signals import SIGNALS

        # SIGTERM, SIGHUP: the running children go on in the home's worker (over HTTP uvicorn
        # takes SIGTERM while it serves, and its exit hook below hands over; SIGHUP stays ours).
        handover.on_termination(off)
        if not http:
            server.run()
            service.close()
            handover.hand_over(off)  # stdin closed: the client left, its work goes on (docs/crash-and-restart.md)
            return
        from offload.mcp_server.http import serve_http

        def on_exit(signum: int) -> None:
            service.close()
            if signum in SIGNALS:  # Ctrl-C stops the server and its work; SIGTERM/SIGHUP hand it over
                handover.hand_over(off)
        serve_http(server, host, port, verify, allow_host,
                   lambda url: typer.echo(f"offload mcp on {url} (Ctrl-C stops it); clients send Authorization: "
                                          f"Bearer TOKEN, the token of {source} (`offload token show`, or one per "
                                          "client: `offload token add NAME`)", err=True),
                   on_exit=on_exit)


def _check_sdk() -> None:
    """Fail before anything is opened when the MCP SDK is not installed (its import comes later)."""
    from importlib.util import find_spec

    for name in ("mcp", "jsonschema"):
        if find_spec(name) is None:
            raise CliError(f"offload mcp needs the MCP SDK ({name} is missing): {install_extra('mcp')}")
