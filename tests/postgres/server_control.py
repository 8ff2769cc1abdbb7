"""Stop and start the test PostgreSQL server the way ``.ci/postgres-up`` does (``pg_ctl`` on
``$OFFLOAD_PG_DIR``, as the ``postgres`` user when run as root), keeping its port so the DSN the
tests hold stays valid. ``why_not()`` says why this process cannot control the server (a
server started elsewhere, another user's cluster); tests skip with that message."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]


class ServerControl:
    def __init__(self, dsn: str, directory: Path | None = None) -> None:
        """``directory``: the cluster's ``OFFLOAD_PG_DIR`` (default: the environment's, as
        ``.ci/postgres-up`` uses it)."""
        self.dir = directory or Path(os.environ.get("OFFLOAD_PG_DIR") or "/tmp/offload-pg")
        self.port = str(urlsplit(dsn).port or 5432)
        self.env = {**os.environ, "OFFLOAD_PG_DIR": str(self.dir), "OFFLOAD_PG_PORT": self.port}

    def why_not(self) -> str | None:
        data = self.dir / "data"
        if not (data / "PG_VERSION").is_file():
            return f"cannot restart the test server: {data} holds no cluster (set OFFLOAD_PG_DIR to the one " \
                   f"`.ci/postgres-up` started)"
        remembered = (self.dir / "port").read_text().strip() if (self.dir / "port").is_file() else ""
        if remembered != self.port:
            return f"cannot restart the test server: the cluster in {self.dir} is on port {remembered or '?'}, " \
                   f"the DSN on {self.port}"
        if os.getuid() != 0 and data.stat().st_uid != os.getuid():
            return f"cannot restart the test server: {data} belongs to another user and this is not root"
        return None

    def stop(self) -> None:
        self._run("stop")

    def start(self) -> None:
        self._run()

    def _run(self, *args: str) -> None:
        done = subprocess.run([str(ROOT / ".ci" / "postgres-up"), *args], env=self.env, capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            raise AssertionError(f".ci/postgres-up {' '.join(args)} failed: {done.stderr[-2000:]}")
