"""The ``offload`` command line (typer + rich): chat, run, agents, inbox, config, demo.

Owns argument parsing and the error boundary. Invariant: every failure a user can cause or
fix (bad config, unknown session, damaged or unwritable state.db) ends as one clear message
on stderr and the exit code ``offload.cli.exit_codes`` assigns it — 2 for configuration, usage and
storage, 3 endpoint, 4 model, 5 unfinished (cut off), 6 no subagent completed, 130 interrupted,
1 only for a bug — never a traceback
(``OFFLOAD_DEBUG=1`` shows it for bug reports).

``offload --help`` must stay fast (well under 0.25 s): this module imports only typer at load
time; each command imports what it needs (rich, pydantic, the engine, httpx) when it
runs, and typer formats help without rich. ``tests/cli/test_cli_startup.py`` checks that.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Iterator, Optional

import typer

from offload.cli import approvals as cli_approvals
from offload.cli import ledger as cli_ledger
from offload.cli import mcp as cli_mcp
from offload.cli import tokens as cli_tokens
from offload.errors import CliError, install_extra

if TYPE_CHECKING:  # the agent runtime (httpx, pydantic) is slow to import: only chat, run and demo load it
    from offload.session.driver import SessionDriver
    from offload.cli.views import Ui

# rich_markup_mode=None: plain help text, so --help never imports rich.
app = typer.Typer(name="offload", no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Background subagents for an LLM agent: delegate, keep talking, get each result back "
                       "as a new turn. Data lives in $HERMES_HOME (default ~/.hermes).")
config_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                         help="Read and change config.yaml; values are validated first.")
app.add_typer(config_app, name="config")
app.add_typer(cli_approvals.app, name="approvals")
app.add_typer(cli_tokens.app, name="token")


def _print_version(value: bool) -> None:
    if value:
        from offload import __version__

        typer.echo(f"offload {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print offload's version and exit.")) -> None:
    pass


@app.command()
def version() -> None:
    """Print offload's version (the same as --version)."""
    from offload import __version__

    typer.echo(f"offload {__version__}")


_VERBOSE = typer.Option(False, "--verbose", "-v", help="log engine activity to stderr")
_RESUME = typer.Option(None, "--resume", "-r", metavar="SESSION", help="continue a stored session (id or 'last')")
_DEMO_MODEL = typer.Option(False, "--demo-model", help="no API key: talk to the scripted offline demo server "
                                                       "(canned answers, not a real model)")


def _log_to_stderr(verbose: bool) -> None:
    from offload.render.terminal import inert

    class InertFormatter(logging.Formatter):  # a logged error may quote a child's text or a foreign row
        def format(self, record: logging.LogRecord) -> str:
            return inert(super().format(record))

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(InertFormatter("offload: %(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])


@contextlib.contextmanager
def _driver(verbose: bool, resume: str | None, sync: bool = False, demo_model: bool = False,
            wakeable: bool = False, ui: Ui | None = None) -> Iterator[SessionDriver]:
    """The session driver of this command, on a runtime built from the config (with the demo
    endpoint for ``--demo-model``; the file is not changed), closed when the command ends.
    ``ui``: where the session prints (default: the terminal's stdout and stderr)."""
    from offload.cli.views import Ui
    from offload.config import load_config
    from offload.session.driver import start_session
    from offload.runtime import Offload

    _log_to_stderr(verbose)
    ui = ui or Ui()
    cfg = load_config()
    if demo_model:
        from offload.cli.demo_model import start_demo_endpoint

        cfg = cfg.model_copy(update=start_demo_endpoint(ui))
    with Offload(cfg) as off:
        from offload.owner import handover

        handover.on_termination(off)  # SIGTERM, SIGHUP: the running subagents go on in the home's worker
        try:
            yield start_session(off, resume, sync_delegation=sync, ui=ui, wakeable=wakeable)
        finally:  # what still runs as the client leaves (an earlier session's, after /new) goes on there too
            handed = handover.hand_over(off)
            if handed:
                ui.say(f"{len(handed)} background delegation(s) of earlier sessions go on in this home's background "
                       f"worker: {', '.join(handed)}", style="dim")


@app.command()
def chat(resume: Optional[str] = _RESUME, demo_model: bool = _DEMO_MODEL, verbose: bool = _VERBOSE) -> None:
    """Talk to the agent; background results appear as new turns when they land.

    While you are idle, each landed result is shown and the agent answers it. In the chat:
    /agents shows the live roster, /stop interrupts background subagents, /quit leaves."""
    from offload.cli.chat import ChatLoop

    with _driver(verbose, resume, demo_model=demo_model) as driver:
        code = ChatLoop(driver).run()
    raise typer.Exit(code)


@app.command()
def run(prompt: Optional[str] = typer.Argument(None, help="what to ask ('-' or a piped stdin: read it from stdin); "
                                                          "omit with --resume to collect results"),
        resume: Optional[str] = _RESUME,
        sync: bool = typer.Option(False, "--sync", help="run delegations inside the turn instead of in the background"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON document on stdout at the end (answers, "
                                                             "delegations with their results, exit code); the "
                                                             "transcript goes to stderr"),
        ask_approvals: bool = typer.Option(False, "--ask-approvals", help="subagents' commands that need a "
                                           "person's approval (delegation.approvals: ask) wait for `offload "
                                           "approvals approve ID` from another terminal instead of being denied"),
        demo_model: bool = _DEMO_MODEL, verbose: bool = _VERBOSE) -> None:
    """One turn, then wait for its background results (each a new turn) and exit.

    The agent's answers go to stdout (with --json, one document instead), everything else to
    stderr. With --sync the subagents run inside the turn instead; the output says which happened."""
    from offload.cli.run_io import prompt_from_stdin
    from offload.cli.views import Ui

    # one request; its session can be woken later
    ui = Ui.for_scripts(answers_on_stdout=not as_json)  # --json owns stdout: the answers go in its document
    try:
        prompt = prompt_from_stdin(prompt, collecting=bool(resume))
        if not prompt and not resume:
            raise CliError("give a prompt (offload run \"...\", or pipe it in: echo \"...\" | offload run -), "
                           "or --resume SESSION to collect its pending results")
        with _driver(verbose, resume, sync, demo_model, wakeable=True, ui=ui) as driver:
            if not ask_approvals:  # nobody sits at a non-interactive run to answer
                driver.runtime.set_approval_surface(no_ask_reason=RUN_CANNOT_ASK)
            from offload.cli.run_io import run_one

            code = run_one(driver, prompt, sync, as_json)
    except Exception as exc:  # a script that asked for --json still gets a document saying why
        message = _user_error(exc) if as_json else None
        if message is not None:
            from offload.cli.ledger import emit_json
            from offload.cli.exit_codes import ExitCode
            from offload.views.result import run_document

            emit_json(run_document(resume, [], [], ExitCode.USAGE, error=message))
        raise
    raise typer.Exit(code)


RUN_CANNOT_ASK = ("`offload run` answers no questions unless started with --ask-approvals (then `offload "
                  "approvals approve ID` answers from another terminal)")


app.command()(cli_ledger.agents)
app.command()(cli_ledger.inbox)
app.command()(cli_ledger.sessions)
app.command()(cli_ledger.stop)
app.command()(cli_mcp.mcp)


@app.command()
def dashboard(host: str = typer.Option("127.0.0.1", "--host", help="address to bind (default: loopback only)"),
              port: int = typer.Option(8765, "--port", min=0, max=65535, help="port to listen on"),
              token: Optional[str] = typer.Option(None, "--token",
                                                  help="deprecated (visible in ps): use $OFFLOAD_DASHBOARD_TOKEN"),
              allow_host: list[str] = typer.Option([], "--allow-host", metavar="NAME",
                                                   help="also answer to this host name (e.g. behind a proxy); "
                                                        "repeatable")) -> None:
    """Web dashboard: live roster, history, one delegation's detail, approvals, interrupt/ack/drop, /metrics.

    Every request needs the token ($OFFLOAD_DASHBOARD_TOKEN, else the home's token store: `offload token
    show`); the address printed at start carries it once. Reads the ledger, so it shows the work of every
    offload process using this $HERMES_HOME."""
    try:
        from offload.dashboard.server import DashboardServer
    except ImportError as exc:
        raise CliError(f"the dashboard needs its libraries ({exc.name} is missing): "
                       f"{install_extra('dashboard')}") from None

    from offload.access import tokens as token_store
    from offload.cli.ledger import runtime
    from offload.home import get_hermes_home

    fixed, _source = token_store.resolve(get_hermes_home(), env_var="OFFLOAD_DASHBOARD_TOKEN", flag=token)
    with runtime() as off:
        DashboardServer(off, host, port, fixed, allowed_hosts=allow_host).serve_until_stopped(
            lambda server: typer.echo(f"offload dashboard on {server.url}/ (Ctrl-C stops it)\n"
                                      f"open {server.login_url} once: your browser then keeps a cookie "
                                      "(scripts send Authorization: Bearer TOKEN; `offload token show`)", err=True))


@config_app.command("get")
def config_get(key: str = typer.Argument(..., help="dotted key, e.g. model or delegation.max_concurrent_children")) -> None:
    """Print the value offload uses for KEY (the file over the defaults)."""
    from offload import config as config_mod

    typer.echo(config_mod.format_value(config_mod.for_display(config_mod.get_value(key), key)))
    override = config_mod.ENV_OVERRIDES.get(key)
    if override and os.environ.get(override, "").strip():
        typer.echo(f"(overridden now by ${override}={os.environ[override].strip()})", err=True)


@config_app.command("set", context_settings={"ignore_unknown_options": True})  # `set KEY -1` needs no `--`
def config_set(key: str = typer.Argument(..., help="dotted key"),
               value: str = typer.Argument(..., help="YAML value: 10, -1, true, null, \"text\", [a, b]")) -> None:
    """Validate and write KEY = VALUE to config.yaml (comments and order kept); on any error the
    file is left unchanged. Problems in other keys do not block this one; they are listed."""
    from offload import config as config_mod
    from offload.home import config_path

    parsed, others = config_mod.set_value(key, value)
    typer.echo(f"{key} = {config_mod.format_value(config_mod.for_display(parsed, key))}  ({config_path()})")
    for problem in others:
        typer.echo(f"offload: config.yaml still has a problem: {problem}", err=True)
    if key in ("base_url", "delegation.base_url") and isinstance(parsed, str):
        from offload.agent.llm_errors import missing_api_version

        warning = missing_api_version(parsed, key)
        if warning:
            typer.echo(f"offload: warning: {warning}", err=True)


@config_app.command("unset")
def config_unset(key: str = typer.Argument(..., help="dotted key, known or not (e.g. a misspelt one)")) -> None:
    """Remove KEY from config.yaml, so its default applies; repairs unknown and deprecated keys."""
    from offload import config as config_mod
    from offload.home import config_path

    if not config_mod.unset_value(key):
        raise CliError(f"{key} is not set in {config_path()}; `offload config show` prints the effective values")
    typer.echo(f"removed {key} from {config_path()}")


@config_app.command("show")
def config_show(as_json: bool = typer.Option(False, "--json", help="print JSON (every key, effective values)")) -> None:
    """Print the whole effective config (the file over the defaults) as YAML, or JSON."""
    from offload import config as config_mod

    values = config_mod.for_display(config_mod.load_file_config().model_dump())
    if as_json:
        cli_ledger.emit_json(values)
        return
    typer.echo(config_mod.format_value(values))


@config_app.command("path")
def config_path_cmd() -> None:
    """Print where config.yaml lives."""
    from offload.home import config_path

    typer.echo(str(config_path()))


@app.command()
def worker(concurrency: Optional[int] = typer.Option(None, "--concurrency", "-c", min=1,
                                                    help="units run here at once (default: "
                                                         "delegation.max_concurrent_children)"),
           idle_exit_s: Optional[float] = typer.Option(None, "--idle-exit-s", min=0, metavar="SECONDS",
                                                       help="single-host ledger: exit after this long with "
                                                            "nothing running or queued (default: never)"),
           verbose: bool = _VERBOSE) -> None:
    """Run background units queued in the ledger, until Ctrl-C.

    On a shared PostgreSQL ledger: parents queue their background work with `delegation.run_on:
    workers`; start this on any host that points at the same ledger.url. On one machine (SQLite):
    the per-home worker that runs the work a closed client handed over and resumes the units of
    processes that died; one per home, started by itself when needed. Ctrl-C drains (running
    units finish), twice exits."""
    from offload.config import load_config
    from offload.runtime import Offload
    from offload.owner.worker import serve

    _log_to_stderr(verbose)
    with Offload(load_config()) as off:
        from offload.render.terminal import inert

        code = serve(off, concurrency, lambda line: print(inert(line), flush=True), idle_exit_s)  # ids from any host
    raise typer.Exit(code)


@app.command()
def gateway(verbose: bool = _VERBOSE) -> None:
    """Serve Telegram chats and Matrix rooms: one agent session per chat/thread, background results delivered back.

    Telegram needs the bot token in the variable that gateway.telegram.token_env names (default
    TELEGRAM_BOT_TOKEN); with no gateway.telegram.allowed_chat_ids yet it serves no chat: write to
    the bot and it answers with your chat's id, and the console prints the command that allows it.
    Matrix needs gateway.matrix.homeserver, .user_id and the access token in MATRIX_ACCESS_TOKEN
    (gateway.matrix.token_env). See docs/gateway.md."""
    from offload.cli.gateway import run_gateway

    raise typer.Exit(run_gateway(verbose))


@app.command()
def demo(keep: bool = typer.Option(False, "--keep", help="keep the demo's temporary data directory")) -> None:
    """Offline demo, no API key: fan-out, live roster, results, crash and recovery.

    Starts a scripted OpenAI-compatible server on 127.0.0.1 (a demo model, not a real one)."""
    from offload.cli.demo import run_demo

    raise typer.Exit(run_demo(keep=keep))


def _fail(message: str, code: int) -> None:
    from rich.console import Console

    from offload.render.terminal import inert

    Console(stderr=True, highlight=False).print(f"offload: {inert(message)}", markup=False, soft_wrap=True,
                                                style="red")
    sys.exit(code)


def _user_error(exc: Exception) -> str | None:
    """The one-line message of an error the user can fix (all exit 2), else None.

    Imported here, not at load time: a ConfigError or storage error can only have been raised
    if its module was already imported, so this costs nothing on the way to --help."""
    if isinstance(exc, CliError):
        return str(exc)
    from offload.config import ConfigError
    from offload.cli.storage_errors import describe

    if isinstance(exc, ConfigError):
        return str(exc)
    return describe(exc)


def _install_tracing() -> None:
    """OpenTelemetry traces when the standard OTEL_* variables ask for them (docs/telemetry.md);
    SIGTERM and SIGHUP export what has ended before they end the command (a worker's and the
    gateway's own SIGTERM handlers replace this one: they drain, and exit flushes)."""
    from offload.telemetry import install_tracing_from_env

    install_tracing_from_env(flush_on_signals=True)


_COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _names_a_completion_shell(argv: list[str]) -> bool:
    """``--install-completion bash`` / ``--show-completion=zsh``: the user said which shell."""
    flags = ("--install-completion", "--show-completion")
    return (any(a in flags and b in _COMPLETION_SHELLS for a, b in zip(argv, argv[1:]))
            or any(a.split("=", 1)[0] in flags and a.split("=", 1)[-1] in _COMPLETION_SHELLS for a in argv))


def main() -> None:
    from offload.cli.streams import tolerate_leaving_readers
    from offload.cli.exit_codes import ExitCode

    tolerate_leaving_readers()  # `offload … | head -1` finishes its work and exits with its own code
    if _names_a_completion_shell(sys.argv[1:]):
        # Typer then takes the shell named on the command line instead of guessing one from the
        # parent processes (which fails without a shell among them, e.g. under CI, and picks
        # the wrong one from inside another shell).
        os.environ["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"
    try:
        _install_tracing()
        app(prog_name="offload")
    except KeyboardInterrupt:
        _fail("interrupted", ExitCode.INTERRUPTED)
    except Exception as exc:
        message = _user_error(exc)
        if message is not None:
            _fail(message, ExitCode.USAGE)
        if os.environ.get("OFFLOAD_DEBUG"):
            raise
        _fail(f"unexpected error: {type(exc).__name__}: {exc} (set OFFLOAD_DEBUG=1 to see the traceback, "
              "and please report it)", ExitCode.ERROR)
