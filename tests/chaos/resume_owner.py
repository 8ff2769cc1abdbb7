"""One process of a resume fault trial (run as a script; ``test_resume_faults`` starts it and it
may SIGKILL itself at a chosen point).

``resume_owner.py ROLE MANIFEST SESSION POINT N PLAN_JSON``, with ``$HERMES_HOME`` set to a
home whose config.yaml has ``delegation.resume: auto`` and the scripted model server:

- ROLE ``owner`` delegates PLAN_JSON (a list of calls, each a list of child goals) in SESSION
  through the Python API, then takes and acknowledges the session's results;
- ROLE ``taker`` only takes and acknowledges them: a long-lived process on the same ledger,
  which resumes the units of the dead owners it finds (PLAN_JSON: the ids still unacknowledged).

Both return once every expected id is acknowledged and nothing of the session is undelivered.
POINT names where this process SIGKILLs itself, at the N-th time it gets there (``none``: never):

    stream          during a child's model stream (its first chunk of the N-th model call)
    reply           between a model reply and its step-log write (the reply is never written)
    mark            between a side-effecting call's start mark and the call (nothing ran)
    effect          after the call ran and before its result is written (it did run)
    finalize        right before the N-th unit's terminal ledger write
    finalized       right after it
    deliver         a result handed over, not yet acknowledged
    acked           a result acknowledged

The manifest (each line fsynced before the next step) says what happened:
``READY``, ``H <id>`` (a handle returned), ``G <id> <state>`` (a result handed over),
``A <id>`` (acknowledged: must never be handed over again), ``K <point>`` (about to die),
``DONE``.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time

from tests.chaos.kill_owner import fsynced_log


def main(role: str, manifest: str, session: str, point: str, n: int, plan: list) -> None:
    log = fsynced_log(manifest)
    die = _killer(point, n, log)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from offload import Offload

    with Offload() as off:
        _arm(point, die, type(off.ledger()))
        log("READY")
        expected: set[str] = set(plan) if role == "taker" else set()
        if role == "owner":
            for goals in plan:
                handle = off.delegate(tasks=[{"goal": g} for g in goals], session=session)
                for unit_id in handle.ids:
                    expected.add(unit_id)
                    log(f"H {unit_id}")
        _take(off, session, expected, log, die)
        log("DONE")


def _take(off, session: str, expected: set[str], log, die) -> None:
    """Take and acknowledge the session's results until all expected are acknowledged and the
    ledger holds nothing of the session undelivered (a dead owner's unit is resumed meanwhile)."""
    acked: set[str] = set()
    while True:
        for result in off.results(session, timeout_s=120):
            log(f"G {result.id} {result.state}")
            die("deliver")
            if result.ack():
                acked.add(result.id)
                log(f"A {result.id}")
            die("acked")
        if expected <= acked and not off.ledger().undelivered_rows(session):
            return
        time.sleep(0.1)  # a dead owner's unit is not recoverable yet (its lease, on PostgreSQL)


def _killer(point: str, n: int, log):
    """``die(here)``: SIGKILL this process the N-th time it is called with ``here == point``."""
    seen = [0]
    lock = threading.Lock()

    def die(here: str) -> None:
        if here != point:
            return
        with lock:
            seen[0] += 1
            if seen[0] != n:
                return
        log(f"K {point}")
        os.kill(os.getpid(), signal.SIGKILL)
    return die


def _arm(point: str, die, ledger_class: type) -> None:
    """Wrap the one place POINT names (the chaos suite's way: the product has no fault hook)."""
    from offload.agent.llm import LLMClient
    from offload.agent.step_log import StepLog

    if point == "stream":
        real_stream = LLMClient.stream_turn

        def stream_turn(self, messages, tools, **kwargs):
            first = [True]
            on_activity = kwargs.get("on_activity")

            def activity() -> None:
                if first[0]:
                    first[0] = False
                    die("stream")
                if on_activity is not None:
                    on_activity()
            return real_stream(self, messages, tools, **{**kwargs, "on_activity": activity})
        LLMClient.stream_turn = stream_turn
    elif point in ("reply", "effect"):
        name = "reply" if point == "reply" else "tool_finished"
        real = getattr(StepLog, name)

        def before(self, *args):
            die(point)
            return real(self, *args)
        setattr(StepLog, name, before)
    elif point == "mark":
        real_mark = StepLog.tool_started

        def after(self, *args):
            real_mark(self, *args)
            die("mark")
        StepLog.tool_started = after
    elif point in ("finalize", "finalized"):
        real_persist = ledger_class.persist_completion

        def persist(self, *args, **kwargs):
            die("finalize")
            out = real_persist(self, *args, **kwargs)
            die("finalized")
            return out
        ledger_class.persist_completion = persist


if __name__ == "__main__":
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for the stacks of a process past its deadline
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), json.loads(sys.argv[6]))
