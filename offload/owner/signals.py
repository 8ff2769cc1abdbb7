"""What an offload process does at a termination signal before the signal does what it did.

``before_termination(work)``: at SIGTERM or SIGHUP, ``work(signal name)`` runs -- the hand-over
of running subagents (``offload.owner.handover``), the telemetry flush
(``offload.telemetry.flush``) -- and then the signal does what it did before: the previous
Python handler runs, or the process dies of it (status 128+n, 143 for SIGTERM).

Why ``work`` runs on its own thread: Python runs a signal handler on the main thread between two
of its bytecodes, maybe inside a lock the work needs -- the engine's table, the ledger's
connection pool, the tracer's open spans -- and those locks are not re-entrant, so work done
in the handler itself could wait forever on its own thread (an ``offload run`` on PostgreSQL,
SIGTERMed while its wait loop read the ledger, did). The handler starts the thread and returns,
so the main thread goes on and lets go of its locks; when the work is done (or after
``limit_s``), the thread raises the signal again, and the handler, seeing it done, does what the
signal did before. A repeat of the signal meanwhile changes nothing.

Invariant: installed from the main thread only (Python sets handlers only there; elsewhere it
installs nothing); a signal set to be ignored stays ignored; the process ends within ``limit_s``
of the first signal plus what the previous handler takes.
"""
from __future__ import annotations

import functools
import logging
import os
import signal
import threading
from typing import Any, Callable

logger = logging.getLogger(__name__)
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
LIMIT_S = 30.0  # past this the signal ends the process whatever the work still waits on


def before_termination(work: Callable[[str], Any], signals: tuple[int, ...] = SIGNALS,
                       limit_s: float = LIMIT_S) -> bool:
    """At each of ``signals``, ``work(signal name)`` first (on its own thread), then what the signal
    did before. False off the main thread (nothing installed)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    leaving = _Leaving(work, limit_s)
    for signum in signals:
        previous = signal.getsignal(signum)
        if previous is not signal.SIG_IGN:
            signal.signal(signum, functools.partial(leaving.at_signal, previous))
    return True


class _Leaving:
    def __init__(self, work: Callable[[str], Any], limit_s: float) -> None:
        self.work, self.limit_s = work, limit_s
        self.started, self.done = threading.Event(), threading.Event()

    def at_signal(self, previous: Any, signum: int, frame: Any) -> None:
        if self.done.is_set():
            _as_before(previous, signum, frame)
        elif not self.started.is_set():
            self.started.set()
            threading.Thread(target=self._leave, args=(signum,), name="offload-leaving", daemon=True).start()

    def _leave(self, signum: int) -> None:
        worker = threading.Thread(target=self._work, args=(signal.Signals(signum).name,),
                                  name="offload-leaving-work", daemon=True)
        worker.start()
        worker.join(self.limit_s)
        if worker.is_alive():
            logger.warning("leaving at %s took over %.0f s; ending without waiting for it",
                           signal.Signals(signum).name, self.limit_s)
        self.done.set()
        # Back on the main thread (aimed at it, so a system call it waits in is interrupted): now
        # the signal does what it did.
        signal.pthread_kill(threading.main_thread().ident or 0, signum)

    def _work(self, name: str) -> None:
        try:
            self.work(name)
        except Exception:  # the signal must still end the process
            logger.warning("leaving at %s failed", name, exc_info=True)


def _as_before(previous: Any, signum: int, frame: Any) -> None:
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)  # die of it, as without the handler (status 128+n)
    os.kill(os.getpid(), signum)
