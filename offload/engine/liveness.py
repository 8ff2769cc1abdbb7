"""Is the process that owns a ledger row still alive?

A pid alone is not an identity: after a crash the kernel may hand the same pid to an
unrelated process. We fingerprint a process by its start time (clock ticks since boot on
Linux), so a reused pid is not mistaken for a live owner. A zombie counts as dead: it can
no longer write its result.
"""
from __future__ import annotations

import os
import sys


def process_start_time(pid: int) -> int | None:
    """Start-time fingerprint of ``pid``, or None where the platform cannot tell."""
    stat = _proc_stat(pid)
    if stat is None:
        return None
    try:
        return int(stat[19])  # field 22 of /proc/<pid>/stat, counted after the ")"
    except (IndexError, ValueError):
        return None


def _proc_stat(pid: int) -> list[str] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields start after the last ")".
    return raw[raw.rfind(")") + 2 :].split()


def pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _proc_stat(pid)
    return not (stat and stat[0] in ("Z", "X"))


def owner_alive(pid: int | None, started_at: int | None) -> bool:
    """True only if ``pid`` runs and, when a fingerprint was recorded, it still matches."""
    if not pid or not pid_exists(pid):
        return False
    if started_at is None:
        return True
    current = process_start_time(pid)
    return current is None or current == started_at


_own_fingerprint: tuple[int, int] | None = None  # (pid, start time) of this process, read once


def current_owner() -> tuple[int, int | None]:
    """This process's pid and start-time fingerprint, stamped on every ledger row it writes.

    A live process's start time never changes, so it is read from /proc once per pid instead
    of once per dispatch (an open + read + parse on the hot path); a forked child has a new
    pid and reads its own. A failed read is not cached: the next dispatch tries again.
    """
    global _own_fingerprint
    pid = os.getpid()
    cached = _own_fingerprint
    if cached is not None and cached[0] == pid:
        return cached
    started = process_start_time(pid)
    if started is not None:
        _own_fingerprint = (pid, started)
    return pid, started
