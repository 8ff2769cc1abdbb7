"""The per-home background worker: one ``offload worker`` per data home, started on demand by a
process that hands its running units over (``offload.owner.handover``), detached so it outlives it.

- **One per home**: the worker holds an exclusive ``flock`` on ``<home>/worker.lock`` while it
  runs (the lock file says its pid); a second one finds it held and exits at once. The lock is
  the kernel's, so a worker killed with SIGKILL frees it with its death.
- **Started on demand** (``ensure``): if nobody holds the lock, ``python -m offload worker
  --idle-exit-s IDLE`` is started in its own session (``setsid``: no terminal, no signal of the
  leaving client's process group reaches it), stdin from ``/dev/null``, stdout and stderr
  appended to ``<home>/logs/worker.log``, with the leaving process's environment (its model key
  among it: credentials are never read from the ledger) and working directory.
- **Exits when idle**: after ``IDLE_EXIT_S`` with nothing running and nothing it may start.

Invariant: ``ensure`` never blocks on the worker and never raises; two racing ``ensure`` calls
may start two workers, of which one keeps the lock and the other exits.
"""
from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

logger = logging.getLogger(__name__)
LOCK_NAME = "worker.lock"
LOG_NAME = "logs/worker.log"
IDLE_EXIT_S = 60.0


def lock_path(home: Path) -> Path:
    return Path(home) / LOCK_NAME


def hold(home: Path) -> IO[str] | None:
    """Take this home's worker lock for this process (kept while the returned file is open);
    None if another worker holds it."""
    Path(home).mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(home), os.O_RDWR | os.O_CREAT, 0o600)
    handle = os.fdopen(fd, "r+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def holder(home: Path) -> int | None:
    """The pid of the worker holding this home's lock, or None if none does."""
    handle = hold(home)
    if handle is not None:
        handle.close()
        return None
    try:
        return int(lock_path(home).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1  # held, by a worker still writing its pid


def kill(home: Path, within_s: float = 10.0) -> None:
    """SIGKILL this home's worker if one was started (tests and benches, before their home goes).
    One started a moment ago may not hold its lock yet: when the home's worker log exists, wait
    (at most ``within_s``) for a holder to kill, then for its lock to be free."""
    if not (Path(home) / LOG_NAME).exists():
        return
    killed, deadline = False, time.monotonic() + within_s
    while time.monotonic() < deadline:
        pid = holder(home)
        if pid is None and killed:
            return
        if pid is not None and pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            killed = True
        time.sleep(0.05)  # a process starting up: nothing to wait on but its lock


def ensure(home: Path, idle_exit_s: float = IDLE_EXIT_S) -> int | None:
    """Start this home's background worker unless one runs; the new worker's pid, else None."""
    try:
        if holder(home) is not None:
            return None
        log = Path(home) / LOG_NAME
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            child = subprocess.Popen(
                [sys.executable, "-m", "offload", "worker", "--idle-exit-s", f"{idle_exit_s:g}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                close_fds=True, env={**os.environ, "HERMES_HOME": str(home)})
        # Reaped when it exits (a long-lived gateway would otherwise keep a zombie until its own end).
        threading.Thread(target=child.wait, name="offload-home-worker-reaper", daemon=True).start()
        logger.info("started the background worker of %s (pid %d, log %s)", home, child.pid, log)
        return child.pid
    except Exception:
        logger.warning("could not start the background worker of %s; the next offload process there resumes its "
                       "work", home, exc_info=True)
        return None
