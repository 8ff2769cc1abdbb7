"""Layers point down inside the one ``offload`` package, and the import graph has no cycles.

The layers, top to bottom (``LAYERS``, DESIGN.md's): the app (CLI, dashboard, telemetry,
testing, the session driver, the worker) → ``offload.gateway`` (chat platforms) → the
runtime (``offload.runtime``, the composition root, with the config it reads, the session it
hosts, its owner loop, its public Python API and the session inbox that API delivers through) → ``offload.subagents`` → ``offload.agent`` → ``offload.toolsets`` →
``offload.context`` (turn-context variables) → ``offload.render`` (pure rendering) →
``offload.engine`` → ``offload.ledger`` → the base (errors, the state words, the data home, ids, the
origin) →
``offload.engine.loop`` (the background-loop primitive the loops of every layer use; it imports
nothing of offload). Every import
counts, including lazy ones inside functions and ``importlib.import_module("literal")``; only
``if TYPE_CHECKING:`` blocks are exempt, because they never run. Counted with those too, the
graph's cycles (modules that name each other's types) are only ``KNOWN_TYPE_CYCLES``. A
submodule importing its own package adds no edge (Python imports the package first
anyway). The renderer and the
turn-context helpers import nothing above the tool layer, and the renderer does no I/O and
reads no config. No module of ``offload`` imports the compat distribution (``tools``,
``gateway``).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "offload"
# (prefix, rank, layer): a module imports only lower ranks, or its own layer. The most specific
# prefix wins; everything else in offload is the app layer.
LAYERS = (
    ("offload.engine.loop", -2, "loop"),
    ("offload.engine.errors", -1, "base"),
    # The words of unit and child states: pure data every layer speaks, the ledger's migrations too.
    ("offload.engine.states", -1, "base"),
    ("offload.errors", -1, "base"),
    ("offload.ids", -1, "base"),
    ("offload.home", -1, "base"),
    ("offload.origin", -1, "base"),
    ("offload.ledger", 0, "ledger"),
    ("offload.engine", 1, "engine"),
    ("offload.render", 2, "render"),
    ("offload.views.result", 2, "render"),  # the result document: a pure rendering of a row or an event
    ("offload.context", 3, "context"),
    ("offload.toolsets", 4, "toolsets"),
    ("offload.agent", 5, "agent"),
    ("offload.subagents", 6, "subagents"),
    ("offload.runtime", 7, "runtime"),
    ("offload.config", 7, "runtime"),  # what the runtime is built from
    ("offload.config_file", 7, "runtime"),
    ("offload.gateway.config", 7, "runtime"),  # the gateway section of that config: a pydantic model
    ("offload.session.conversation", 7, "runtime"),
    ("offload.owner.loop", 7, "runtime"),
    ("offload.owner.control_requests", 7, "runtime"),
    ("offload.owner.activity", 7, "runtime"),
    ("offload.api", 7, "runtime"),  # Offload's public methods (it inherits them)
    ("offload.session.inbox", 7, "runtime"),  # the consumer path those methods deliver through
    ("offload.owner.journal", 7, "runtime"),
    # A package of issue 46 whose modules serve two layers: the app's named first, the rest
    # and the package itself in the lower layer that imports it.
    ("offload.owner.worker", 9, "app"),
    ("offload.owner", 7, "runtime"),
    ("offload.session.driver", 9, "app"),
    ("offload.session.units", 9, "app"),
    ("offload.session", 7, "runtime"),
    ("offload.views.rows", 9, "app"),
    ("offload.views.ledger", 9, "app"),
    ("offload.views", 2, "render"),
    ("offload.gateway", 8, "gateway"),
    ("offload", 9, "app"),
)
KNOWN_CYCLES: set[frozenset[str]] = set()
# Counting ``if TYPE_CHECKING:`` imports too (modules that name each other's types): where two
# files owned one thing, it has a smaller module both use or a Protocol where it is used. The one
# group left is ``Offload`` itself over two files: it inherits api.py's methods, which type
# ``self`` as ``Offload``.
KNOWN_TYPE_CYCLES = {frozenset({"offload.runtime", "offload.api"})}
# Counting a package's ``__init__`` as a module too (issue 46's own count: a submodule naming its
# package is an edge to it), two groups are left, each a package whose ``__init__`` is its front
# door: ``offload`` re-exports ``Offload`` (runtime, api, config), and ``offload.ledger`` exposes
# ``open_ledger`` over the backends it opens. Telemetry's modules name each other, not the package.
KNOWN_PACKAGE_CYCLES = {
    frozenset({"offload", "offload.api", "offload.config", "offload.runtime"}),
    frozenset({"offload.ledger", "offload.ledger.factory", "offload.ledger.memory", "offload.ledger.migrations",
               "offload.ledger.postgres.connections", "offload.ledger.postgres.ledger", "offload.ledger.sqlite",
               "offload.ledger.sqlite_files"}),
}
RENDERER = sorted((PACKAGE / "render").glob("*.py"))
CONTEXT = sorted((PACKAGE / "context").glob("*.py"))
ABOVE_TOOLS = ("offload.agent", "offload.subagents", "offload.gateway", "offload.cli", "offload.runtime", "tools",
               "gateway")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imported_names(tree: ast.AST, type_checking: bool = False) -> set[str]:
    """Every module name imported anywhere in ``tree`` (``from a import b`` yields a and a.b);
    ``type_checking``: count the imports under ``if TYPE_CHECKING:`` too."""
    names: set[str] = set()
    pending = [tree]
    while pending:
        node = pending.pop()
        if _is_type_checking(node) and not type_checking:
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
        pending.extend(ast.iter_child_nodes(node))
    return names


def _graph(type_checking: bool = False, packages: bool = False) -> dict[str, set[str]]:
    """``packages``: a submodule naming its own package is an edge to it too."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {n for n in _imported_names(ast.parse(path.read_text(encoding="utf-8")), type_checking)
                   if n in paths and (n != name if packages else not _is_ancestor(n, name))}
            for name, path in paths.items()}


def _is_ancestor(package: str, module: str) -> bool:
    """``module`` itself or a package containing it. Python imports a module's packages before
    the module whatever it says, so naming one adds no edge (a package's ``__init__`` that
    imports its own submodule lazily, which then reads the package, is no cycle)."""
    return module == package or module.startswith(package + ".")


def _layer(module: str) -> tuple[int, str]:
    for prefix, rank, layer in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return rank, layer
    raise AssertionError(f"{module} is outside the offload package")


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_no_module_imports_a_layer_above_its_own():
    upward = sorted(f"{module} -> {imported}" for module, imports in _graph().items() for imported in imports
                    if _layer(imported)[0] > _layer(module)[0]
                    or (_layer(imported)[0] == _layer(module)[0] and _layer(imported)[1] != _layer(module)[1]))
    assert upward == []


def test_no_module_of_offload_imports_the_compat_distribution():
    compat = {"tools", "gateway"}
    offenders = sorted(str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py") if _roots(p) & compat)
    assert offenders == []


def test_the_import_graph_has_no_cycles_but_the_known_ones():
    assert set(_cycles(_graph())) == KNOWN_CYCLES


def test_the_package_root_holds_the_composition_root_and_the_base_only():
    """Every other module lives in a package whose name says its owner (issue 46): a new one
    goes there, or this list says why every layer needs it."""
    root = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert root == ["api", "config", "config_file", "errors", "home", "ids", "origin", "runtime"]


def test_counting_type_only_imports_the_graph_has_no_cycles_but_the_known_ones():
    assert set(_cycles(_graph(type_checking=True))) == KNOWN_TYPE_CYCLES


def test_counting_packages_too_two_circle_groups_are_left():
    assert set(_cycles(_graph(type_checking=True, packages=True))) == KNOWN_PACKAGE_CYCLES


def test_the_cycle_finder_finds_a_lazy_and_an_importlib_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]
    assert _is_ancestor("offload.telemetry", "offload.telemetry.tracing") and not _is_ancestor("offload.t", "offload.tools")
    assert _layer("offload.engine.errors") < _layer("offload.ledger.sqlite") < _layer("offload.engine.stall")
    tree = ast.parse("def f():\n    import x.y\n    importlib.import_module('z')\nif TYPE_CHECKING:\n    import t\n")
    assert _imported_names(tree) == {"x.y", "z"} and _imported_names(tree, type_checking=True) == {"x.y", "z", "t"}


def _roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _imported_names(ast.parse(path.read_text(encoding="utf-8")))}


@pytest.mark.parametrize("path", [*RENDERER, *CONTEXT], ids=lambda p: str(p.relative_to(REPO)))
def test_renderer_and_turn_context_import_nothing_from_upper_layers(path):
    names = _imported_names(ast.parse(path.read_text(encoding="utf-8")))
    assert not {n for n in names if any(_is_ancestor(top, n) for top in ABOVE_TOOLS)}


@pytest.mark.parametrize("path", RENDERER, ids=lambda p: str(p.relative_to(REPO)))
def test_renderer_does_no_io_imports(path):
    assert not (_roots(path) & {"os", "subprocess", "sqlite3", "socket", "pathlib", "io", "tools", "yaml"})
