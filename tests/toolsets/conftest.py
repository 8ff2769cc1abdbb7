"""A fresh workspace and ToolContext per test; the workspace sits beside an 'outside' folder
so escape tests have a real target to (fail to) reach."""
from __future__ import annotations

from pathlib import Path

import pytest

from offload.toolsets.toolspec import ToolContext


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret\n")
    return out


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace)
