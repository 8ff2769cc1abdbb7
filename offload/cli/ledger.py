"""``offload agents``, ``inbox``, ``sessions`` and ``stop``: the ledger and the session store as
any process sees them.

Registered on the app by ``offload.cli.app``; like it, this module imports only typer at load time
so ``offload --help`` stays fast. Listing works on a read-only ``$HERMES_HOME``
(``offload.views.ledger``); anything that writes says so and exits 2 there. Ids may be
abbreviated to a unique prefix (``offload.ids``).
"""
from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any, Iterator, Optional

import typer

from offload.errors import CliError

if TYPE_CHECKING:
    from offload.cli.views import Ui
    from offload.views.ledger import LedgerView
    from offload.runtime import Offload

_JSON = typer.Option(False, "--json", help="print JSON with stable keys (docs/commands.md) instead of text")
SETTLED_SHOWN = 10


def emit_json(data: Any) -> None:
    from offload.render.terminal import inert_json

    typer.echo(inert_json(json.dumps(data, indent=2, ensure_ascii=False)))


@contextlib.contextmanager
def runtime() -> Iterator[Offload]:
    """This command's runtime, on the config of ``$HERMES_HOME`` (read once, checked as `offload
    run` checks it: a broken file is its one-line error, exit 2, never an empty listing that
    reads as lost history), closed at the end."""
    from offload.config import load_config
    from offload.runtime import Offload

    _refuse_missing_home()
    with Offload(load_config()) as off:
        yield off


def _refuse_missing_home() -> None:
    """A ``$HERMES_HOME`` set to a folder that does not exist (a typo) is an error, never an
    empty listing that reads as "no delegations"."""
    import os

    from offload.errors import CliError

    home = os.environ.get("HERMES_HOME")
    if home and not os.path.isdir(os.path.expanduser(home)):
        raise CliError(f"HERMES_HOME={home} is no such directory; check the path, or unset HERMES_HOME "
                       "to use ~/.hermes")


def agents(watch: bool = typer.Option(False, "--watch", "-w", help="refresh until Ctrl-C"),
           interval_s: float = typer.Option(1.0, "--interval", min=0.2, help="seconds between refreshes"),
           as_json: bool = _JSON) -> None:
    """Background delegations as recorded in the ledger, from any process.

    Shows units queued to start (in line, for whom), running units (owner alive or not, each
    child done or running with its API calls, current tool and seconds idle as its owner last
    published them), results awaiting delivery and recently delivered ones."""
    from offload.cli.views import Ui
    from offload.views.ledger import LedgerView

    ui = Ui()
    with runtime() as off:
        _agents(ui, LedgerView(off.ledger(), on_read_only=ui.warn), watch, interval_s, as_json)


def _agents(ui: Ui, view: LedgerView, watch: bool, interval_s: float, as_json: bool) -> None:
    from rich.console import Group
    from rich.live import Live

    from offload.views import rows as ledger_rows
    from offload.cli.views import ledger_finished, ledger_queued, ledger_running

    if as_json:
        running = view.running()
        live = view.activity(running)
        emit_json({"running": [ledger_rows.record(r, live.get(r.delegation_id), view.ledger) for r in running],
                    "queued": [ledger_rows.record(r, None, view.ledger) for r in view.queued()],
                    "pending": [ledger_rows.record(r) for r in view.pending()],
                    "recent": [ledger_rows.record(r) for r in view.settled(SETTLED_SHOWN)]})
        return

    def tables() -> Group:
        running, queued = view.running(), view.queued()
        return Group(*([ledger_queued(queued, ledger=view.ledger)] if queued else []),
                     ledger_running(running, activity=view.activity(running), ledger=view.ledger),
                     ledger_finished(view.pending(), "finished, awaiting delivery"),
                     ledger_finished(view.settled(SETTLED_SHOWN), "recently delivered or dropped"))
    if not watch:
        ui.show(tables())
        return
    with Live(tables(), console=ui.console, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(interval_s)
                live.update(tables())
        except KeyboardInterrupt:
            pass


def inbox(ack: list[str] = typer.Option([], "--ack", metavar="ID", help="acknowledge a pending result (repeatable)"),
          ack_all: bool = typer.Option(False, "--ack-all", help="acknowledge every pending result"),
          show: Optional[str] = typer.Option(None, "--show", metavar="ID", help="print a result as the agent reads it"),
          all_rows: bool = typer.Option(False, "--all", help="also list delivered and dropped results"),
          as_json: bool = _JSON) -> None:
    """Results waiting for delivery, including those recovered after a crash or restart.

    `offload chat --resume SESSION` delivers them; --ack marks one handled without delivery.
    IDs may be shortened to a unique prefix (deleg_eb85, or eb85)."""
    from offload.cli.views import Ui
    from offload.views.ledger import LedgerView

    ui = Ui()
    with runtime() as off:
        view = LedgerView(off.ledger(), on_read_only=ui.warn)
        _recover(ui, off, view, quiet=as_json)
        if show:
            if as_json:  # the result document: also for a unit still running (state, children so far)
                emit_json(result_document(off, view, delegation_id(view, show)).to_json())
                return
            ui.say(full_result(off, view, show))
            return
        _inbox(ui, off, view, ack, ack_all, all_rows, as_json)


def _inbox(ui: Ui, off: Offload, view: LedgerView, ack: list[str], ack_all: bool, all_rows: bool,
           as_json: bool) -> None:
    from offload.views import rows as ledger_rows
    from offload.cli.views import ledger_finished

    pending = view.pending()
    targets = [row.delegation_id for row in pending] if ack_all else [_pending_id(view, i, pending) for i in ack]
    if targets:
        _acknowledge(ui, off, view, targets)
        pending = view.pending()
    queued = view.queued()
    if as_json:
        data = {"pending": [ledger_rows.record(r) for r in pending],
                "queued": [ledger_rows.record(r, None, view.ledger) for r in queued]}
        if all_rows:
            data["settled"] = [ledger_rows.record(r) for r in view.settled(50)]
        emit_json(data)
        return
    ui.show(ledger_finished(pending, "pending results"))
    if queued:
        ui.say(f"{len(queued)} unit(s) queued, not started yet (their results come later): `offload agents` "
               "lists them", style="dim")
    if pending:
        ui.say("deliver them with `offload chat --resume SESSION` (or `offload run --resume SESSION`); "
               "`offload inbox --ack ID` drops one without delivering it", style="dim")
    if all_rows:
        ui.show(ledger_finished(view.settled(50), "delivered or dropped"))


def _recover(ui: Ui, off: Offload, view: LedgerView, quiet: bool) -> None:
    """Settle rows whose owner died (so they show as pending); skipped on a read-only home."""
    from offload.ledger import LedgerError

    if not view.running():  # nothing to recover, and no write on a home that may be read-only
        return
    try:
        with _told_here_not_logged():
            recovered = off.deliveries.recover_abandoned()
    except LedgerError as exc:
        if exc.kind != "unwritable":
            raise
        view.use_read_only()
        return
    if recovered and not quiet:
        ui.say(f"recovered {recovered} delegation(s) whose owner process had exited (finished children keep "
               "their results; the rest are reported unknown)", style="yellow")


@contextlib.contextmanager
def _told_here_not_logged() -> Iterator[None]:
    """Inbox says the recovery in one line (and lists each row); the engine's per-row log of the
    same recovery, which a process without a log handler prints bare on stderr, would say it twice."""
    from offload.engine.log import logger

    def not_the_recovery(record: Any) -> bool:
        return not str(record.msg).startswith("Recovered delegation")

    logger.addFilter(not_the_recovery)
    try:
        yield
    finally:
        logger.removeFilter(not_the_recovery)


def delegation_id(view: LedgerView, wanted: str, rows: list[Any] | None = None) -> str:
    """The full id ``wanted`` abbreviates, among ``rows`` (default: every listed row)."""
    from offload.ids import resolve

    if rows is None:
        exact = view.get(wanted)
        if exact is not None:
            return exact.delegation_id
        rows = [*view.queued(), *view.running(), *view.pending(), *view.settled(1000)]
    return resolve(wanted, (r.delegation_id for r in rows), kind="delegation", id_prefix="deleg_",
                   listing="offload agents")


def _pending_id(view: LedgerView, wanted: str, pending: list[Any]) -> str:
    try:
        return delegation_id(view, wanted, pending)
    except CliError as exc:
        raise CliError(f"not pending: {wanted} ({exc}); `offload inbox` lists the pending ids") from None


def full_result(off: Offload, view: LedgerView, wanted: str) -> str:
    """A finished delegation's result exactly as the agent reads it (``wanted``: an id or prefix)."""
    row = view.get(delegation_id(view, wanted))
    if row is None or not row.event:
        state = f" (it is {row.state})" if row is not None else ""
        raise CliError(f"delegation {wanted!r} has not finished yet{state}; `offload agents` shows what runs and "
                       "what is queued")
    return off.render(row.event) or ""


def result_document(off: Offload, view: LedgerView, full_id: str, event: dict[str, Any] | None = None) -> Any:
    """``offload.views.result``'s document of one delegation, from its ledger row (else from
    ``event``, a result this process delivered whose row is gone); text as the agent read it."""
    from offload.views import result

    row = view.get(full_id)
    if row is None and event is not None:
        return result.from_event(event, off.render)
    if row is None:
        raise CliError(f"no delegation {full_id!r}; `offload agents` lists them")
    return result.from_row(row, off.render)


def run_results(driver: Any, dispatched: list[str]) -> dict[str, Any]:
    """``offload run --json``: the delegations this run dispatched, then the results of earlier
    ones it delivered (``--resume``), each as its result document."""
    from offload.views import result
    from offload.views.ledger import LedgerView

    off = driver.runtime
    view = LedgerView(off.ledger())
    events = {str(e.get("delegation_id")): e for e in driver.delivered}
    ids = [i for i in dict.fromkeys([*dispatched, *events]) if i]
    docs = [result_document(off, view, i, events.get(i)) for i in ids]
    return result.run_document(driver.session_id, driver.answers, docs, int(driver.exit_code))


def _acknowledge(ui: Ui, off: Offload, view: LedgerView, ids: list[str]) -> None:
    if view.read_only:
        raise CliError(f"cannot acknowledge: {off.home} is read-only; make it writable first")
    for full_id in ids:
        off.deliveries.mark_delivered(full_id)
        ui.say(f"acknowledged {full_id}")


def sessions(limit: int = typer.Option(20, "--limit", "-n", min=1, help="how many, most recent first"),
             as_json: bool = _JSON) -> None:
    """Stored chat sessions, most recent first: id, last use, messages, model, results pending.

    Continue one with `offload chat --resume ID` (a unique prefix is enough)."""
    from offload.agent.session_store import stored_sessions
    from offload.cli.views import Ui, sessions_table
    from offload.views.ledger import LedgerView

    ui = Ui()
    with runtime() as off:
        listed = stored_sessions(off.home / "state.db", limit=limit)  # read-only: creates nothing
        rows = LedgerView(off.ledger(), on_read_only=ui.warn).pending()
    pending: dict[str, int] = {}
    for row in rows:
        session = row.parent_session_id or row.origin_session
        pending[session] = pending.get(session, 0) + 1
    if as_json:
        emit_json([{"id": s.session_id, "created_at": s.created_at, "updated_at": s.updated_at, "model": s.model,
                     "title": s.title, "messages": s.message_count, "pending_results": pending.get(s.session_id, 0)}
                    for s in listed])
        return
    ui.show(sessions_table(listed, pending))


STOP_WAIT_S = 15.0
_POLL_S = 0.1


def stop(wanted: str = typer.Argument(..., metavar="ID", help="a running or queued delegation (a unique prefix is enough)"),
         wait_s: float = typer.Option(STOP_WAIT_S, "--wait", min=0, help="seconds to wait for it to stop")) -> None:
    """Stop one running background delegation, in whichever process runs it (chat, run, gateway
    or worker; on a shared PostgreSQL ledger, on any host), or one still queued (it never starts).

    Its partial result is still delivered to its session, as with /stop in the chat."""
    from offload.cli.views import Ui
    from offload.views.ledger import LedgerView

    with runtime() as off:
        _stop(Ui(), off, LedgerView(off.ledger()), wanted, wait_s)


def _stop(ui: Ui, off: Offload, view: LedgerView, wanted: str, wait_s: float) -> None:
    from offload.owner import control_requests
    from offload.cli.exit_codes import ExitCode
    from offload.ledger import LedgerError

    ledger = off.ledger()
    queued = _queued_row(view, wanted)
    if queued is not None:  # nobody runs it: stopped here, reported as a result of its session
        if not off.admission.cancel(lambda r: r.delegation_id == queued.delegation_id, "stopped with offload stop"):
            raise CliError(f"{queued.delegation_id} started meanwhile; run `offload stop {queued.delegation_id}` again")
        row = queued
    else:
        row = _running_row(view, wanted)
    owner = control_requests.owner_label(row)
    if queued is None and control_requests.owner_gone(ledger, row):
        raise CliError(f"{row.delegation_id} is not running any more: its owner ({owner}) exited; "
                       "`offload inbox` recovers it")
    try:
        if queued is None:
            control_requests.request(ledger, row.delegation_id, ttl_s=wait_s + 1.0)
    except LedgerError as exc:
        raise CliError(f"{exc}; stop it in the process that runs it ({owner}) instead") from exc
    try:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            now = view.get(row.delegation_id)
            if now is None or now.state not in ("running", "queued"):
                ui.say(f"stopped {row.delegation_id}; its partial result goes to session "
                       f"{row.parent_session_id or row.origin_session}")
                return
            time.sleep(_POLL_S)
    finally:
        control_requests.withdraw(ledger, row.delegation_id)
    ui.error(f"{row.delegation_id} did not stop within {wait_s:g} s: its owner ({owner}) did not act on the "
             "request; is it an offload older than this one? Stop it there.")
    raise typer.Exit(ExitCode.ERROR)


def _queued_row(view: LedgerView, wanted: str) -> Any:
    """The queued row ``wanted`` names (an id or a unique prefix of one), else None."""
    queued = view.queued()
    try:
        full_id = delegation_id(view, wanted, queued) if queued else None
    except CliError:
        return None
    return next((r for r in queued if r.delegation_id == full_id), None)


def _running_row(view: LedgerView, wanted: str) -> Any:
    from offload.views.rows import row_state

    running = view.running()
    try:
        full_id = delegation_id(view, wanted, running)
    except CliError:
        finished = view.get(delegation_id(view, wanted))  # unknown everywhere: that error is the one to show
        raise CliError(f"{finished.delegation_id if finished else wanted} is not running "
                       f"(it is {row_state(finished) if finished else 'unknown'}); nothing to stop") from None
    return next(r for r in running if r.delegation_id == full_id)
