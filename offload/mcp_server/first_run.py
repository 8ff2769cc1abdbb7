"""What ``offload mcp`` checks when it starts, for a server a desktop client launched: Claude
Desktop and Cursor start servers with a minimal environment (no API key) and often in ``/``.

Owns ``FirstRun``: the setup problems found at start, and the one line ``delegate_task``
answers with while one stands. Invariants: a problem is a tool error naming the fix (the
client's ``env`` or ``args``, docs/mcp.md), never a traceback or "retry"; the server still
starts and serves its read tools; without ``--workspace``, a client root or ``workspace`` in
config.yaml, subagents never work in ``/`` or the user's home (an explicit choice of either is
allowed).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offload.config import OffloadConfig, resolve_api_key
from offload.errors import ConfigError

CLIENT_ENV = ("MCP clients start servers with a minimal environment: put the key in this server's \"env\" in "
              "your client's configuration (docs/mcp.md), then restart the server")


@dataclass(frozen=True)
class FirstRun:
    """``key``: why no subagent can reach its model (None: it can); ``cwd``: why the server's
    working directory may not be the subagents' workspace (None: it may)."""

    key: str | None = None
    cwd: str | None = None

    @classmethod
    def check(cls, cfg: OffloadConfig, workspace_given: bool, cwd: Path | None = None) -> "FirstRun":
        try:
            resolve_api_key(cfg)
            key = None
        except ConfigError as exc:
            key = f"offload mcp cannot start subagents: {exc}. {CLIENT_ENV}."
        return cls(key, None if workspace_given or cfg.workspace else cwd_problem(cwd or Path.cwd()))

    def problem(self, root: Path | None) -> str | None:
        """Why ``delegate_task`` cannot run now (``root``: the client's root, if it sent one)."""
        return self.key or (self.cwd if root is None else None)


def cwd_problem(cwd: Path) -> str | None:
    here = cwd.resolve()
    if here == Path("/") or here == Path.home().resolve():
        where = "/" if here == Path("/") else f"your home directory ({here})"
        return (f"offload mcp was started in {where} and neither --workspace nor a client root says where subagents "
                "should work, so they would work on everything there: add \"--workspace\", \"/path/to/project\" to "
                "this server's \"args\" in your client's configuration (docs/mcp.md), then restart the server")
    return None
