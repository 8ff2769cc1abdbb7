"""``offload token``: the access tokens of this home (``offload.access.tokens``): the operator
token the dashboard and ``offload mcp --http`` accept, and named tokens, one per MCP client.

Registered on the app by ``offload.cli.app``; imports only typer at load time. Invariant: a
token's value is printed only by ``show``, ``add`` and ``rotate``, alone on stdout (so
``$(offload token show)`` and ``offload token show > file`` take nothing else).
"""
from __future__ import annotations

import time

import typer

app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                  help="Access tokens for the dashboard and MCP over HTTP (kept 0600 in $HERMES_HOME/tokens.json).")
_NAME = typer.Argument("operator", help="the token's name (default: operator, the dashboard's and yours)")


def _store():
    from offload.home import get_hermes_home
    from offload.access.tokens import TokenStore

    return TokenStore(get_hermes_home())


@app.command()
def show(name: str = _NAME) -> None:
    """Print token NAME (the operator's is made on first use)."""
    typer.echo(_store().get(name))


@app.command("list")
def list_tokens() -> None:
    """The names of the tokens and when each was made (never their values)."""
    store = _store()
    listing = store.listing()
    if not listing:
        typer.echo(f"no tokens yet in {store.path}; `offload token show` (or starting the dashboard) makes one")
    for name, created_at in listing:
        made = time.strftime("%Y-%m-%d %H:%M", time.localtime(created_at)) if created_at else "?"
        typer.echo(f"{name}\tmade {made}")


@app.command()
def add(name: str = typer.Argument(..., help="a name for the client, e.g. claude-code")) -> None:
    """Make a new token NAME for one MCP client and print it (revoke it alone with `remove`)."""
    typer.echo(_store().add(name))


@app.command()
def rotate(name: str = _NAME) -> None:
    """Replace token NAME with a new one and print it: the old one stops working at once
    (for the operator token, browsers must open the dashboard's new address once)."""
    typer.echo(_store().rotate(name))


@app.command()
def remove(name: str = typer.Argument(..., help="the token to revoke")) -> None:
    """Revoke token NAME."""
    _store().remove(name)
    typer.echo(f"removed token {name!r}", err=True)
