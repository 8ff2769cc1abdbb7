"""Closing a client hands its work over (issue 44, point 4): what a long-lived offload process
(``mcp``, ``mcp --http``, ``chat``, ``gateway``, ``run``) does with its running background units
when it leaves without being asked to stop them -- stdin EOF of ``offload mcp``, SIGTERM, SIGHUP,
the chat's second Ctrl-C, the end of a ``chat`` or ``run`` with work still running (an earlier
session's, after ``/new``: the session it waited for has nothing left).

``hand_over(off)``: every running unit whose children write a step log (``delegation.resume:
auto`` at dispatch, offload's own agent loop) is given to a process that outlives this one:

1. its children are parked at their next safe point (``offload.engine.handover``): before their
   next model reply or side-effecting tool call is logged; a tool call already running may
   finish and record its result within ``bound_s``;
2. each unit goes back to the queue in one write (``ledger.hand_over``), its owner cleared and
   marked handed over, so any long-lived process on the ledger may take it at once (no waiting
   for this pid to die or a lease to run out); every later write of this process for it is
   refused (the owner epoch, the lease token), and its finalize here says nothing;
3. the per-home background worker (``offload.owner.home_worker``) is started if none runs, and takes it.

Units that cannot be handed over (an injected runner, ``resume: never``, no more resumes left)
are left as before: they end with this process and are recovered by the next one. What stops
the work instead -- the first Ctrl-C, ``/stop``, ``offload stop`` -- is not this module.

Invariant: this process adopts nothing once it has started leaving, and returns within about
``bound_s`` plus one ledger write per unit.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from offload.runtime import Offload

logger = logging.getLogger(__name__)
BOUND_S = 1.0  # how long a running tool call may take to finish and be recorded
_one_at_a_time = threading.Lock()


def hand_over(off: Offload, *, bound_s: float = BOUND_S, start_worker: bool = True) -> list[str]:
    """Hand this runtime's durable running units over; the ids handed over. Never raises. Calls
    that overlap (a signal's and the client's own exit) run one after the other, and a unit is
    handed over once."""
    try:
        with _one_at_a_time:
            return _hand_over(off, bound_s, start_worker)
    except Exception:  # leaving must never fail: what was not handed over is recovered later
        logger.warning("handing running subagents over failed; the next offload process on this home resumes "
                       "them", exc_info=True)
        return []


def _hand_over(off: Offload, bound_s: float, start_worker: bool) -> list[str]:
    from offload.engine.states import ACTIVE_STATES, STOP_USER
    from offload.subagents.resume import handed_task

    off.admission.adopts = lambda row: False  # a leaving process takes nothing (it would hand it back)
    engine = off.engine
    with engine.lock:
        ids = [did for did, record in engine.records.items()
               if record.get("status") in ACTIVE_STATES and record.get("_durable")
               and record.get("_ledger") is not None and record.get("_stop_reason") != STOP_USER  # stopping: not ours to pass on
               and not engine.handover.was_handed(did)]
    if not ids:
        return []
    engine.handover.begin(ids)
    try:
        if not engine.handover.wait_quiet(ids, time.monotonic() + bound_s):
            logger.info("a tool call still ran after %.1f s; the process that takes it over tells its model so", bound_s)
        cfg = off.delegate_tool.delegation_config()
        handed = [did for did in ids if _give(off.ledger(), did, cfg, handed_task)]
        for did in handed:
            engine.handover.handed(did)
    finally:
        engine.handover.release()
    engine.interrupt(lambda record: record.get("delegation_id") in handed, "handed over to another process")
    if handed:
        logger.warning("handed %d running background unit(s) over: %s", len(handed), ", ".join(handed))
        from offload.subagents.queue import needs_shared_ledger

        if start_worker and needs_shared_ledger(off.ledger()) is not None:  # one host: the home's worker
            from offload.owner import home_worker

            home_worker.ensure(off.home)
    return handed


def _give(ledger: Any, delegation_id: str, cfg: Any, handed_task: Callable[[Any, Any], Any]) -> bool:
    row = ledger.get(delegation_id)
    if row is None or row.state != "running":
        return False
    task = handed_task(row, cfg)
    return task is not None and ledger.hand_over(row, task, time.time())


def on_termination(off: Offload) -> None:
    """At SIGTERM and SIGHUP, hand the running units over, then do what the signal did before
    (flush telemetry, exit with 128+n): ``offload.owner.signals``, which runs the hand-over off
    the handler (the main thread may hold a lock it needs). Off the main thread (an embedding
    app's), nothing is installed."""
    from offload.owner.signals import before_termination

    before_termination(lambda name: hand_over(off))
