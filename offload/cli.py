"""The ``offload`` command line (typer + rich): chat, run, agents, inbox, config, demo.

Owns argument parsing and the error boundary. Invariant: every failure a user can cause or
fix (bad config, unknown session, unreachable ledger) ends as one clear message on stderr
and a non-zero exit code — 2 for configuration and usage errors, 1 otherwise — never a
traceback (``OFFLOAD_DEBUG=1`` shows it for bug reports).

``offload --help`` must stay fast (well under 0.25 s): this module imports only typer at load
time; each command imports what it needs (rich, pydantic, the engine, the openai SDK) when it
runs, and typer formats help without rich. ``tests/cli/test_cli_polish.py`` checks that.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Optional

import typer

from offload.errors import CliError

if TYPE_CHECKING:  # the agent runtime imports the openai SDK (~1 s): only chat, run and demo load it
    from offload.driver import SessionDriver
    from offload.views import Ui

# rich_markup_mode=None: plain help text, so --help never imports rich.
app = typer.Typer(name="offload", no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Background subagents for an LLM agent: delegate, keep talking, get each result back "
                       "as a new turn. Data lives in $HERMES_HOME (default ~/.hermes).")
config_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="Read and change config.yaml; values are validated first.")
app.add_typer(config_app, name="config")


def _print_version(value: bool) -> None:
    if value:
        from offload import __version__

        typer.echo(f"offload {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print offload's version and exit.")) -> None:
    pass  # the app's help text is Typer(help=...) above

_VERBOSE = typer.Option(False, "--verbose", "-v", help="log engine activity to stderr")
_RESUME = typer.Option(None, "--resume", "-r", metavar="SESSION", help="continue a stored session (id or 'last')")


def _driver(verbose: bool, resume: str | None, sync: bool = False) -> SessionDriver:
    from offload.driver import start_session

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="offload: %(levelname)s: %(message)s")
    return start_session(resume, sync_delegation=sync)


@app.command()
def chat(resume: Optional[str] = _RESUME, verbose: bool = _VERBOSE) -> None:
    """Talk to the agent; background results appear as new turns when they land.

    While you are idle, each landed result is shown and the agent answers it. In the chat:
    /agents shows the live roster, /stop interrupts background subagents, /quit leaves."""
    from offload.chat import ChatLoop

    raise typer.Exit(ChatLoop(_driver(verbose, resume)).run())


@app.command()
def run(prompt: Optional[str] = typer.Argument(None, help="what to ask; omit with --resume to collect results"),
        resume: Optional[str] = _RESUME,
        sync: bool = typer.Option(False, "--sync", help="run delegations inside the turn instead of in the background"),
        verbose: bool = _VERBOSE) -> None:
    """One turn, then wait for its background results (each a new turn) and exit.

    With --sync the subagents run inside the turn instead; the output says which happened."""
    if not prompt and not resume:
        raise CliError("give a prompt (offload run \"...\"), or --resume SESSION to collect its pending results")
    driver = _driver(verbose, resume, sync)
    ui = driver.ui
    ui.say(f"offload run — session {driver.session_id}", style="bold")
    driver.deliver_ready()  # results replayed for a resumed session come before the new prompt
    expected = 0
    if prompt:
        ui.answer(prompt, label="you")
        turn = driver.user_turn(prompt)
        expected = sum(len(h.get("units") or [h]) for h in turn.dispatched)
    if sync:
        ui.say("--sync: delegations ran synchronously inside the turn; nothing to wait for", style="yellow")
    expected = max(expected, driver.live_count())
    if expected:
        ui.say(f"waiting for {expected} background result(s)… (Ctrl-C stops them)", style="yellow")
    delivered = driver.wait_for_background()
    ui.say(f"done; continue with: offload chat --resume {driver.session_id}", style="dim")
    raise typer.Exit(0 if delivered else 130)


@app.command()
def agents(watch: bool = typer.Option(False, "--watch", "-w", help="refresh until Ctrl-C"),
           interval_s: float = typer.Option(1.0, "--interval", min=0.2, help="seconds between refreshes")) -> None:
    """Background delegations as recorded in the ledger, from any process.

    Shows running units (owner alive or not, children done so far), results awaiting
    delivery and recently delivered ones. Inside `offload chat`, /agents shows live per-child
    activity (API calls, current tool, seconds idle)."""
    from rich.console import Group
    from rich.live import Live

    from offload.views import ledger_finished, ledger_running, make_console
    from tools import ledger_queries

    def view() -> Group:
        return Group(ledger_running(ledger_queries.running_rows()),
                     ledger_finished(ledger_queries.pending_rows(), "finished, awaiting delivery"),
                     ledger_finished(ledger_queries.settled_rows(10), "recently delivered or dropped"))
    console = make_console()
    if not watch:
        console.print(view())
        return
    with Live(view(), console=console, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(interval_s)
                live.update(view())
        except KeyboardInterrupt:
            pass


@app.command()
def inbox(ack: list[str] = typer.Option([], "--ack", metavar="ID", help="acknowledge a pending result (repeatable)"),
          ack_all: bool = typer.Option(False, "--ack-all", help="acknowledge every pending result"),
          show: Optional[str] = typer.Option(None, "--show", metavar="ID", help="print a result as the agent reads it"),
          all_rows: bool = typer.Option(False, "--all", help="also list delivered and dropped results")) -> None:
    """Results waiting for delivery, including those recovered after a crash or restart.

    `offload chat --resume SESSION` delivers them; --ack marks one handled without delivery."""
    from offload.views import Ui, ledger_finished
    from tools import async_delegation as engine
    from tools import ledger_queries

    ui = Ui()
    recovered = engine.recover_abandoned_delegations()
    if recovered:
        ui.say(f"recovered {recovered} delegation(s) whose owner process had exited (finished children keep "
               "their results; the rest are reported unknown)", style="yellow")
    if show:
        _show(ui, show)
        return
    pending = ledger_queries.pending_rows()
    targets = [row.delegation_id for row in pending] if ack_all else ack
    if targets:
        _acknowledge(ui, targets, {row.delegation_id for row in pending})
        pending = ledger_queries.pending_rows()
    ui.show(ledger_finished(pending, "pending results"))
    if pending:
        ui.say("deliver them with `offload chat --resume SESSION` (or `offload run --resume SESSION`); "
               "`offload inbox --ack ID` drops one without delivering it", style="dim")
    if all_rows:
        ui.show(ledger_finished(ledger_queries.settled_rows(50), "delivered or dropped"))


def _show(ui: Ui, delegation_id: str) -> None:
    from tools import async_delegation as engine
    from tools.process_registry_notifications import format_process_notification

    row = engine.get_durable_delegation(delegation_id)
    if row is None or not row.get("event"):
        raise CliError(f"no finished delegation {delegation_id!r} in the ledger; `offload inbox --all` lists them")
    ui.say(format_process_notification(row["event"]) or "")


def _acknowledge(ui: Ui, ids: list[str], pending: set[str]) -> None:
    unknown = [i for i in ids if i not in pending]
    if unknown:
        raise CliError(f"not pending: {', '.join(unknown)}; `offload inbox` lists the pending ids")
    from tools import async_delegation as engine

    for delegation_id in ids:
        engine.mark_completion_delivered(delegation_id)
        ui.say(f"acknowledged {delegation_id}")


@app.command()
def dashboard(host: str = typer.Option("127.0.0.1", "--host", help="address to bind; not loopback needs --token"),
              port: int = typer.Option(8765, "--port", min=0, max=65535, help="port to listen on"),
              token: Optional[str] = typer.Option(None, "--token", envvar="OFFLOAD_DASHBOARD_TOKEN",
                                                  help="secret every request must carry (required off loopback)")) -> None:
    """Web dashboard: live roster, history, one delegation's detail, interrupt/ack/drop, /metrics.

    Reads the ledger, so it shows the work of every offload process using this $HERMES_HOME."""
    try:
        from offload.dashboard.server import DashboardServer
    except ImportError as exc:
        raise CliError(f"the dashboard needs its libraries ({exc.name} is missing): "
                       "pip install 'offload[dashboard]'") from None

    server = DashboardServer(host, port, token)
    guard = "; every request must carry the token (open it once with ?token=SECRET)" if token else ""
    typer.echo(f"offload dashboard on http://{host}:{port}/ (Ctrl-C stops it){guard}", err=True)
    server.run()


@config_app.command("get")
def config_get(key: str = typer.Argument(..., help="dotted key, e.g. model or delegation.max_concurrent_children")) -> None:
    """Print the value offload uses for KEY (the file over the defaults)."""
    from offload import config as config_mod

    typer.echo(config_mod.format_value(config_mod.get_value(key)))
    override = config_mod.ENV_OVERRIDES.get(key)
    if override and os.environ.get(override, "").strip():
        typer.echo(f"(overridden now by ${override}={os.environ[override].strip()})", err=True)


@config_app.command("set")
def config_set(key: str = typer.Argument(..., help="dotted key"),
               value: str = typer.Argument(..., help="YAML value: 10, true, null, \"text\", [a, b]")) -> None:
    """Validate and write KEY = VALUE to config.yaml; on any error the file is left unchanged."""
    from offload import config as config_mod
    from tools.hermes_home import config_path

    parsed = config_mod.set_value(key, value)
    typer.echo(f"{key} = {config_mod.format_value(parsed)}  ({config_path()})")


@config_app.command("show")
def config_show() -> None:
    """Print the whole effective config (the file over the defaults) as YAML."""
    from offload import config as config_mod

    typer.echo(config_mod.format_value(config_mod.load_file_config().model_dump()))


@config_app.command("path")
def config_path_cmd() -> None:
    """Print where config.yaml lives."""
    from tools.hermes_home import config_path

    typer.echo(str(config_path()))


@app.command()
def demo(keep: bool = typer.Option(False, "--keep", help="keep the demo's temporary data directory")) -> None:
    """Offline demo, no API key: fan-out, live roster, results, crash and recovery.

    Starts a scripted OpenAI-compatible server on 127.0.0.1 (a demo model, not a real one)."""
    from offload.demo import run_demo

    raise typer.Exit(run_demo(keep=keep))


def _fail(message: str, code: int) -> None:
    from rich.console import Console

    Console(stderr=True, highlight=False).print(f"offload: {message}", markup=False, soft_wrap=True, style="red")
    sys.exit(code)


def _user_error_code(exc: Exception) -> int | None:
    """The exit code of an error the user can fix (2: config or usage, 1: storage), else None.

    Imported here, not at load time: a ConfigError or SessionStoreError can only have been
    raised if its module was already imported, so this costs nothing on the way to --help."""
    from agent.session_store import SessionStoreError
    from offload.config import ConfigError

    if isinstance(exc, (ConfigError, CliError)):
        return 2
    if isinstance(exc, SessionStoreError):
        return 1
    return None


def main() -> None:
    try:
        app(prog_name="offload")
    except Exception as exc:
        code = _user_error_code(exc)
        if code is not None:
            _fail(str(exc), code)
        if os.environ.get("OFFLOAD_DEBUG"):
            raise
        _fail(f"unexpected error: {type(exc).__name__}: {exc} (set OFFLOAD_DEBUG=1 to see the traceback, "
              "and please report it)", 1)
