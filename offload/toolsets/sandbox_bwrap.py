"""The bubblewrap layout of a sandboxed command: which folders it sees, and how (pure argv
building), plus the one probe that says whether this machine's ``bwrap`` can build it.

The layout (an allow-list, not ``/`` bound whole):

* system folders (``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc``, ``/opt``, ``/nix``…) bound
  read-only one by one; a top-level symlink (merged ``/usr``) is recreated as the same symlink;
  ``/etc/shadow`` and ``/etc/gshadow`` masked;
* ``/proc`` of the command's own PID namespace (offload's processes are not in it), a minimal
  ``/dev``; ``/tmp``, ``/run``, ``/var``, ``/dev/shm`` and the user's home private tmpfs of a
  capped size, so no host Unix socket (PostgreSQL's, D-Bus, docker.sock, ssh-agent) exists in it;
* the interpreter offload runs on (``sys.prefix``, ``sys.base_prefix``: pyenv, uv and venvs
  under the home stay usable) and ``terminal.read_paths`` read-only; the workspace and
  ``terminal.write_paths`` writable;
* offload's home and the user's secret folders (``~/.ssh``, ``~/.aws``, ``~/.config``…) masked
  by an empty tmpfs wherever a bound folder contains them (``offload chat`` run from ``~``).

Invariant: a path never appears writable unless it is the workspace or a ``write_paths`` entry;
the namespaces are PID, mount, IPC, UTS, cgroup, user (nested user namespaces disabled) and,
unless ``network`` is ``host``, network.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix")
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers")
# Where the user keeps credentials: masked when the workspace (or a bound path) contains them.
SECRET_DIRS = (".ssh", ".aws", ".config", ".gnupg", ".docker", ".kube", ".azure", ".netrc", ".pgpass",
               ".git-credentials", ".npmrc", ".pypirc", ".local/share/keyrings", ".hermes")
# Namespaces; --disable-userns (bwrap 0.8) needs --unshare-user and stops a nested one.
_NAMESPACES = ("--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try")


def _mb(size_mb: int) -> str:
    return str(size_mb * 1024 * 1024)


def _system_binds(root: Path = Path("/")) -> list[str]:
    argv: list[str] = []
    for name in SYSTEM_DIRS:
        path = root / name.lstrip("/")
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            argv += ["--ro-bind", name, name]
    for name in MASKED_FILES:
        if os.path.exists(name):
            argv += ["--ro-bind", "/dev/null", name]
    return argv


def interpreter_paths() -> list[Path]:
    """The prefixes of the Python offload runs on, resolved (a venv and the one it was made from)."""
    found = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return sorted(found)


def _covered(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _under_system(path: Path) -> bool:
    return any(path == Path(d) or path.is_relative_to(Path(d)) for d in SYSTEM_DIRS if Path(d).is_dir()
               and not Path(d).is_symlink())


def layout_argv(*, workspace: Path, cwd: str, offload_home: Path | None, user_home: Path, network: str,
                tmp_size_mb: int, read_paths: list[Path], write_paths: list[Path]) -> list[str]:
    """The bwrap options (without the binary) for one command run from ``cwd``."""
    size = _mb(tmp_size_mb)
    argv = [*_NAMESPACES, *(["--unshare-net"] if network != "host" else []), "--die-with-parent",
            "--hostname", "sandbox", *_system_binds(),
            "--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm",
            "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/run",
            "--size", size, "--tmpfs", "/var", "--symlink", "../run", "/var/run", "--dir", "/var/tmp"]
    writable = [workspace, *write_paths]
    if not _covered(user_home, writable) and user_home != Path("/") and not _under_system(user_home):
        argv += ["--size", size, "--tmpfs", str(user_home)]  # an empty home of its own (never over / or /usr)
    readable = [p for p in [*interpreter_paths(), *read_paths]
                if not _under_system(p) and not _covered(p, writable) and not _covered(user_home, [p])]
    for path in readable:
        if path.exists():
            argv += ["--ro-bind", str(path), str(path)]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    argv += _masks([*readable, *writable], offload_home, user_home)
    return argv + ["--chdir", cwd]


def _masks(bound: list[Path], offload_home: Path | None, user_home: Path) -> list[str]:
    """An empty tmpfs over offload's home and each secret folder a bound path exposes."""
    hidden = [user_home / name for name in SECRET_DIRS]
    if offload_home is not None:
        hidden.append(offload_home)
    argv: list[str] = []
    for path in hidden:
        if not path.exists() or not _covered(path, bound):
            continue
        argv += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    return argv


@functools.lru_cache(maxsize=8)
def probe(bwrap: str) -> str | None:
    """None when ``bwrap`` builds the sandbox's namespaces on this machine, else why not (its
    stderr: no user namespaces, Docker's seccomp, AppArmor's userns restriction). Run once."""
    argv = [bwrap, *_NAMESPACES, "--unshare-net", "--die-with-parent", *_system_binds(), "--proc", "/proc",
            "--dev", "/dev", "--tmpfs", "/tmp", "--", "/bin/sh", "-c", "true"]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit code {done.returncode}")
