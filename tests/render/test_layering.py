"""Layers point down: the renderer and session helpers in tools/ never import gateway/ or above."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
MODULES = [
    "notification_text.py",
    "process_registry_notifications.py",
    "process_registry_notifications_blocks.py",
    "session_env.py",
    "approval_context.py",
]
FORBIDDEN = ("gateway", "agent", "offload")


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", MODULES)
def test_tools_module_imports_nothing_from_upper_layers(module):
    assert not (_imported_roots(TOOLS / module) & set(FORBIDDEN))


def test_renderer_does_no_io_imports():
    for module in ("notification_text.py", "process_registry_notifications.py",
                   "process_registry_notifications_blocks.py"):
        assert not (_imported_roots(TOOLS / module) & {"os", "subprocess", "sqlite3", "socket", "pathlib", "io"})


DELEGATION = TOOLS.parent / "delegation"


@pytest.mark.parametrize("module", sorted(str(p.relative_to(DELEGATION)) for p in DELEGATION.rglob("*.py")))
def test_delegation_package_imports_nothing_above_it(module):
    assert not (_imported_roots(DELEGATION / module) & {"tools", *FORBIDDEN})
