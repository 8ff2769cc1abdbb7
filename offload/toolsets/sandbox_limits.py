"""Caps on what sandboxed commands may use: processes (a fork bomb) and memory, so no command can
freeze or OOM the offload process; the private ``/tmp``'s size is bwrap's (``--size``).

Two mechanisms, both applied where they work, by a one-line ``/bin/sh`` launcher that then
executes bwrap (``CommandLimits.prefix``: one ``exec``, so no fork escapes; a ``preexec_fn``
would cost more, since it stops Python from using ``vfork`` for a large threaded process):

* rlimits (``ulimit``): ``RLIMIT_NPROC`` and ``RLIMIT_DATA`` (per process), set before bwrap makes
  the user namespace. The kernel does not enforce ``RLIMIT_NPROC`` for real root (uid 0 is exempt
  however many capabilities it drops), so as root they cap memory only;
* cgroups (v1 ``pids`` and ``memory`` controllers, or v2 ``pids.max`` / ``memory.max``) under
  offload's own cgroup, where that is writable (root, or a delegated v2 subtree): every process of
  every sandboxed command of this offload process shares one count and one memory cap, which
  offload itself (its threads count as processes) is outside of. One set per process and
  limits, made on first use and removed at exit: a new cgroup per command cost ~7 ms more per
  command (measured, bench case 6); one left by a killed process is removed by the next one.

Invariant: a command that cannot enter its cgroups or set its rlimits does not run (the
launcher's steps are joined with ``&&``).
"""
from __future__ import annotations

import atexit
import itertools
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()
_lock = threading.Lock()
_made: dict[tuple[int, int], list[tuple[str, Path]]] = {}


@dataclass
class CommandLimits:
    prefix: list[str] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # 'pids', 'memory' (v1) or 'unified' (v2)


def _own_cgroups() -> dict[str, Path]:
    """controller ('pids', 'memory', or 'unified') -> this process's cgroup folder."""
    found: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if not controllers:
            for mount in (_CGROUP_ROOT / "unified", _CGROUP_ROOT):
                if (mount / "cgroup.controllers").exists():
                    found["unified"] = mount / rel
                    break
        for name in ("pids", "memory"):
            if name in controllers.split(","):
                found[name] = _CGROUP_ROOT / name / rel
    return found


_FILES = {"pids": ("pids.max",), "memory": ("memory.limit_in_bytes",), "unified": ("pids.max", "memory.max")}


def _sweep(base: Path) -> None:
    """Remove the cgroups a dead offload process left (empty once their processes ended)."""
    for path in base.glob("offload-*-*"):
        pid = path.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                path.rmdir()
            except OSError:
                pass


def _make_cgroup(base: Path, kind: str, max_processes: int, max_memory_b: int) -> Path | None:
    _sweep(base)
    path = base / f"offload-{os.getpid()}-{next(_counter)}"
    try:
        path.mkdir()
    except OSError:
        return None
    values = {"pids.max": max_processes, "memory.limit_in_bytes": max_memory_b, "memory.max": max_memory_b}
    written = False
    for name in _FILES[kind]:
        try:
            (path / name).write_text(str(values[name]))
            written = True
        except OSError:
            continue  # v2 without this controller delegated
    if not written:
        path.rmdir()
        return None
    return path


def _cgroups_for(max_processes: int, max_memory_b: int) -> list[tuple[str, Path]]:
    key = (max_processes, max_memory_b)
    with _lock:
        if key not in _made:
            made = [(kind, _make_cgroup(base, kind, max_processes, max_memory_b))
                    for kind, base in _own_cgroups().items()]
            _made[key] = [(kind, path) for kind, path in made if path is not None]
        return _made[key]


@atexit.register
def _remove_cgroups() -> None:
    for cgroups in _made.values():
        for _, path in cgroups:
            try:
                path.rmdir()
            except OSError:
                pass  # still busy: the next offload process sweeps it


def command_limits(max_processes: int, max_memory_mb: int) -> CommandLimits:
    """The launcher for one command: rlimits, then its cgroups, then ``exec`` the rest."""
    cgroups = _cgroups_for(max_processes, max_memory_mb * 1024 * 1024)
    # dash sets RLIMIT_NPROC with -p, bash with -u; both set the hard and soft limit without -H/-S.
    steps = [f"ulimit -d {max_memory_mb * 1024}",
             f"{{ ulimit -u {max_processes} 2>/dev/null || ulimit -p {max_processes}; }}",
             *(f'echo $$ > "${i + 1}"' for i in range(len(cgroups))), f"shift {len(cgroups)}", 'exec "$@"']
    return CommandLimits(["/bin/sh", "-c", " && ".join(steps), "sh", *(str(p / "cgroup.procs") for _, p in cgroups)],
                         [p for _, p in cgroups], [kind for kind, _ in cgroups])


def limits_in_force(max_processes: int, max_memory_mb: int) -> dict[str, str]:
    """What caps commands on this machine, as the bench and the docs report it."""
    kinds = sorted(command_limits(max_processes, max_memory_mb).kinds)
    rlimit = "RLIMIT_DATA (NPROC not enforced for root)" if os.geteuid() == 0 else "RLIMIT_NPROC, RLIMIT_DATA"
    return {"cgroups": ",".join(kinds) or "none", "rlimits": rlimit}
