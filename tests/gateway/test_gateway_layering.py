"""gateway/ sits beside the CLI layer, not above it: no gateway module imports ``offload`` at
run time (type-only imports under ``TYPE_CHECKING`` are fine), so the CLI can wire the gateway
without a cycle."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"


def runtime_import_roots(path: Path) -> set[str]:
    roots: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(ast.parse(path.read_text(encoding="utf-8")))
    return roots


@pytest.mark.parametrize("module", sorted(str(p.relative_to(GATEWAY)) for p in GATEWAY.rglob("*.py")))
def test_gateway_modules_do_not_import_the_cli_layer(module):
    assert "offload" not in runtime_import_roots(GATEWAY / module)
