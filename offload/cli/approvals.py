"""``offload approvals``: list the subagents' commands waiting for a person's answer, and answer
one (``approve ID`` / ``deny ID``) from any terminal on the ledger (docs/approvals.md).

Registered on the app by ``offload.cli.app``; imports only typer at load time. Ids may be a
unique prefix. Invariant: an answer goes through ``offload.subagents.approvals.decide``, so it
is recorded (who, when) and a request already answered is reported, never answered twice.
"""
from __future__ import annotations

import getpass
import time
from typing import Any, Optional

import typer

from offload.errors import CliError
from offload.render.terminal import inert

app = typer.Typer(rich_markup_mode=None, invoke_without_command=True,
                  help="Subagents' risky commands waiting for your answer (delegation.approvals: ask).")
_BY = typer.Option(None, "--by", help="who answers, as recorded (default: cli:<your user name>)")


@app.callback()
def approvals(ctx: typer.Context,
              session: Optional[str] = typer.Option(None, "--session", help="only this session's requests"),
              as_json: bool = typer.Option(False, "--json", help="print the pending requests as JSON")) -> None:
    """List the pending requests (the default), or answer one: approve ID, deny ID."""
    if ctx.invoked_subcommand is not None:
        return
    from offload.cli.ledger import emit_json, runtime
    from offload.subagents.approvals import pending

    with runtime() as off:
        waiting = pending(off.ledger(), session)
    if as_json:
        emit_json(waiting)
        return
    if not waiting:
        typer.echo("no approval requests are waiting")
        return
    now = time.time()
    for row in waiting:
        typer.echo(inert(request_line(row, now), keep_newlines=False))
    typer.echo("answer with: offload approvals approve ID  |  offload approvals deny ID")


def request_line(row: dict[str, Any], now: float) -> str:
    """One pending request as the CLI and the chat show it."""
    left_s = max(0, int(row["expires_at"] - now))
    where = f"{row.get('delegation_id') or 'inline'} child {row.get('child')}"
    return (f"{row['request_id']}  {where}  [{', '.join(row.get('categories') or [])}]  {row['command']!r}  "
            f"({'; '.join(row.get('reasons') or [])}; denied in {left_s} s unless answered)")


@app.command()
def approve(request_id: str = typer.Argument(..., metavar="ID", help="a pending request (a unique prefix is enough)"),
            by: Optional[str] = _BY) -> None:
    """Let the subagent run the command."""
    _answer(request_id, True, by)


@app.command()
def deny(request_id: str = typer.Argument(..., metavar="ID", help="a pending request (a unique prefix is enough)"),
         by: Optional[str] = _BY) -> None:
    """Refuse the command: the subagent reads that you denied it."""
    _answer(request_id, False, by)


def _answer(wanted: str, allow: bool, by: str | None) -> None:
    from offload.cli.ledger import runtime
    from offload.subagents.approvals import ApprovalError, decide, find_pending

    with runtime() as off:
        ledger = off.ledger()
        try:
            row = decide(ledger, find_pending(ledger, wanted), allow, by or f"cli:{getpass.getuser()}")
        except ApprovalError as exc:
            raise CliError(str(exc)) from None
    typer.echo(inert(f"{row['request_id']}: {row['state']} by {row['decided_by']} ({row['command']!r})",
                     keep_newlines=False))
