"""Caps on what one sandboxed command may use: processes (a fork bomb) and memory, so no command
can freeze or OOM the offload process; the private ``/tmp``'s size is bwrap's (``--size``).

Two mechanisms, both applied where they work:

* rlimits (``prlimit``, util-linux): ``RLIMIT_NPROC`` and ``RLIMIT_DATA`` (per process), set before
  bwrap makes the user namespace. The kernel does not enforce ``RLIMIT_NPROC`` for real root
  (uid 0 is exempt however many capabilities it drops), so as root they cap memory only;
* a cgroup per command (v1 ``pids`` and ``memory`` controllers, or v2 ``pids.max`` /
  ``memory.max``) under offload's own cgroup, where that is writable (root, or a delegated v2
  subtree): every process of the command, however many, shares one count and one memory cap.
  The command enters it before bwrap starts (a two-line ``/bin/sh`` launcher), so no fork escapes.

Invariant: ``CommandLimits.prefix`` is what goes before ``bwrap``; ``release`` removes the
command's cgroups after it ended (best effort: a folder still busy is retried by the next call).
"""
from __future__ import annotations

import itertools
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()
_stale: list[Path] = []
_stale_lock = threading.Lock()


@dataclass
class CommandLimits:
    prefix: list[str] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # 'pids', 'memory' (v1) or 'unified' (v2)

    def release(self) -> None:
        with _stale_lock:
            pending = [*_stale, *self.cgroups]
            _stale.clear()
            for path in pending:
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    _stale.append(path)


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


def _make_cgroup(base: Path, kind: str, max_processes: int, max_memory_b: int) -> Path | None:
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


def command_limits(max_processes: int, max_memory_mb: int) -> CommandLimits:
    """The prefix and cgroups for one command."""
    memory_b = max_memory_mb * 1024 * 1024
    limits = CommandLimits()
    for kind, base in _own_cgroups().items():
        made = _make_cgroup(base, kind, max_processes, memory_b)
        if made is not None:
            limits.cgroups.append(made)
            limits.kinds.append(kind)
    if limits.cgroups:
        script = " && ".join(f'echo $$ > "${i + 1}"' for i in range(len(limits.cgroups)))
        limits.prefix += ["/bin/sh", "-c", f'{script} && shift {len(limits.cgroups)} && exec "$@"', "sh",
                          *(str(p / "cgroup.procs") for p in limits.cgroups)]
    prlimit = shutil.which("prlimit")
    if prlimit is not None:
        limits.prefix += [prlimit, f"--nproc={max_processes}", f"--data={memory_b}", "--"]
    return limits


def limits_in_force(max_processes: int, max_memory_mb: int) -> dict[str, str]:
    """What caps a command on this machine, as the bench and the docs report it."""
    probe = command_limits(max_processes, max_memory_mb)
    try:
        kinds = sorted(probe.kinds)
    finally:
        probe.release()
    rlimit = "rlimits (NPROC not enforced for root)" if os.geteuid() == 0 else "rlimits"
    return {"cgroups": ",".join(kinds) or "none", "rlimits": rlimit if shutil.which("prlimit") else "none"}
