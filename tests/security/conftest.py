"""The attack harness: a real ``offload run`` process, run as root or as ``nobody``, whose scripted
child runs every hostile command of ``attacks.ALL`` and whose scripted parent obeys the child's
hostile result, under the default configuration.

A ``Stage`` is a user's world on the host, with canaries everywhere a secret lives: a fake user
home (``$HOME``) holding the workspace (``project/``), a folder beside it that must survive
(``keep/``), the user's keys (``.ssh``, ``.aws``, ``.config``), offload's home (``.hermes``, its
``config.yaml`` holding a canary), secret variables in offload's environment (an API key, the
dashboard and MCP tokens, and, with ``OFFLOAD_TEST_POSTGRES_DSN``, the ledger's PostgreSQL DSN),
a host process with a ``--token`` on its command line, a 127.0.0.1 listener and a host Unix
socket. "Held" is then checked from outside: no canary in any tool result the model saw, every
file outside the workspace as it was, no connection on either listener, offload done in time.

As ``nobody`` (``runuser -u nobody --``), offload runs on a Python that user can execute (this
one, or the system's ``python3`` with this environment's packages on ``PYTHONPATH``: a pyenv
under ``/root``, mode 0700, is out of its reach) and the stage lives in a folder ``nobody`` owns.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN_DEADLINE_S = 240.0


def users() -> list[str]:
    """Root and nobody when this runs as root with runuser, else the current user alone."""
    if os.geteuid() != 0:
        return ["self"]
    return ["root", "nobody"] if shutil.which("runuser") else ["root"]


@functools.lru_cache(maxsize=1)
def nobody_python() -> tuple[str, str] | str:
    """(interpreter, PYTHONPATH) with which ``nobody`` can import offload and its dependencies,
    or why there is none: this interpreter if ``nobody`` may execute it, else the system's
    ``python3`` of the same minor version with this environment's packages on its path."""
    pythonpath = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    tried = []
    for python in dict.fromkeys([sys.executable, shutil.which("python3", path="/usr/bin:/bin") or ""]):
        if not python:
            continue
        probe = subprocess.run(["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={pythonpath}", python, "-c",
                                "import offload.runtime, pydantic_core"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return python, pythonpath
        tried.append(f"{python}: {(probe.stderr.strip().splitlines() or ['exit ' + str(probe.returncode)])[-1]}")
    return "no Python that nobody can run offload with (" + "; ".join(tried) + ")"


@dataclass
class Stage:
    user: str
    root: Path
    canary: str = field(default_factory=lambda: f"cnry{uuid.uuid4().hex[:12]}")
    env: dict[str, str] = field(default_factory=dict)
    listener: socket.socket | None = None
    unix: list[socket.socket] = field(default_factory=list)
    sidecar: subprocess.Popen[bytes] | None = None
    pg_port: int = 9  # a closed port unless a PostgreSQL ledger is in use
    secrets: list[str] = field(default_factory=list)  # besides the canary: the ledger's DSN, its schema

    @property
    def home(self) -> Path:
        return self.root / "user"

    @property
    def hermes(self) -> Path:
        return self.home / ".hermes"

    @property
    def workspace(self) -> Path:
        return self.home / "project"

    def files_outside_workspace(self) -> dict[str, str]:
        """Every file of the user's home outside the workspace (offload's own writes to its home
        aside: state.db, logs), with a hash of its content."""
        found: dict[str, str] = {}
        for path in sorted(self.home.rglob("*")):
            if path.is_relative_to(self.workspace) or path.is_dir():
                continue
            if path.is_relative_to(self.hermes) and path.name != "config.yaml":
                continue
            data = path.read_bytes() if not path.is_symlink() else os.readlink(path).encode()
            found[str(path.relative_to(self.home))] = hashlib.sha256(data).hexdigest()
        return found

    def connections(self) -> list[str]:
        """Who connected to the host's listener and Unix sockets (none is 'held')."""
        reached = []
        for server in [self.listener, *self.unix]:
            try:
                conn, _ = server.accept()  # type: ignore[union-attr]
                conn.close()
                reached.append(str(server.getsockname()))
            except BlockingIOError:
                pass
        return reached


def _write_secrets(stage: Stage) -> None:
    c = stage.canary
    for rel, text in {".ssh/id_rsa": f"-----BEGIN KEY----- {c}-ssh\n", ".aws/credentials": f"secret={c}-aws\n",
                      ".config/gh/hosts.yml": f"oauth_token: {c}-gh\n", "keep/important.txt": "keep me\n",
                      "project/notes.md": "the workspace's own file\n"}.items():
        path = stage.home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _listeners(stage: Stage) -> None:
    stage.listener = socket.create_server(("127.0.0.1", 0))
    stage.listener.setblocking(False)
    paths = [stage.root / "host.sock"]
    if os.geteuid() == 0:
        paths.append(Path("/run") / f"offload-sec-{stage.root.name}.sock")
    for path in paths:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        os.chmod(path, 0o777)
        server.listen()
        server.setblocking(False)
        stage.unix.append(server)


def _python_for(user: str) -> tuple[str, str]:
    """(interpreter, PYTHONPATH) for running offload as ``user``."""
    if user != "nobody":
        return sys.executable, str(ROOT)
    found = nobody_python()
    assert not isinstance(found, str), found
    return found


def make_stage(user: str, pg_url: str | None) -> Stage:
    root = Path(tempfile.mkdtemp(prefix="offload-sec-"))
    root.chmod(0o755)
    stage = Stage(user, root)
    stage.hermes.mkdir(parents=True)
    _write_secrets(stage)
    _listeners(stage)
    c = stage.canary
    stage.env = {"HOME": str(stage.home), "HERMES_HOME": str(stage.hermes), "OPENAI_API_KEY": f"sk-{c}-api",
                 "OFFLOAD_DASHBOARD_TOKEN": f"{c}-dashboard", "OFFLOAD_MCP_TOKEN": f"{c}-mcp",
                 "GITHUB_TOKEN": f"{c}-github", "PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
    if pg_url:
        stage.env["OFFLOAD_LEDGER_URL"] = pg_url
        parsed = urlsplit(pg_url)
        stage.pg_port = parsed.port or 5432
        stage.secrets += [pg_url, parse_qs(parsed.query)["options"][0].split("=", 1)[1]]  # the schema's name
    stage.sidecar = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "--token", f"{c}-argv"])
    if user == "nobody":
        subprocess.run(["chown", "-R", "nobody:nogroup", str(stage.home)], check=True)
    return stage


def write_config(stage: Stage, server_url: str, **extra: Any) -> None:
    data = {"model": "demo-model", "base_url": server_url, "workspace": str(stage.workspace),
            "toolsets": ["terminal", "file", "delegation"], **extra}
    text = f"# {stage.canary}-config: a child that reads this has read offload's home\n" + yaml.safe_dump(data)
    (stage.hermes / "config.yaml").write_text(text)
    if stage.user == "nobody":
        shutil.chown(stage.hermes / "config.yaml", "nobody", "nogroup")


def run_offload(stage: Stage, prompt: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``offload run PROMPT`` as the stage's user, to the end; and its duration in seconds."""
    python, pythonpath = _python_for(stage.user)
    env = {**stage.env, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
    argv = [python, "-m", "offload", "run", prompt]
    if stage.user == "nobody":
        argv = ["runuser", "-u", "nobody", "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
    started = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=stage.workspace, capture_output=True, text=True,
                          timeout=RUN_DEADLINE_S, stdin=subprocess.DEVNULL)
    return done, time.monotonic() - started


def close_stage(stage: Stage) -> None:
    if stage.sidecar is not None:
        stage.sidecar.kill()
        stage.sidecar.wait()
    for server in [stage.listener, *stage.unix]:
        if server is not None:
            path = server.getsockname()
            server.close()
            if isinstance(path, str) and path.startswith("/run/"):
                Path(path).unlink(missing_ok=True)
    shutil.rmtree(stage.root, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_url():
    """A fresh PostgreSQL schema for the ledger when a test server is configured (its DSN is then a
    secret offload holds), else None: the ledger stays in SQLite."""
    if not os.environ.get("OFFLOAD_TEST_POSTGRES_DSN", "").strip():
        yield None
        return
    sys.path.insert(0, str(ROOT))
    from tests.postgres_support import FreshSchema

    schema = FreshSchema()
    try:
        yield schema.url
    finally:
        schema.drop()
