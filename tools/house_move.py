"""The house moves of issue 46, re-runnable: ``python tools/house_move.py [--check-only] [--no-check]``.

Moves every module named in ``MOVES`` (and every file matching ``PATTERNS``: PostgreSQL's
``offload/ledger/postgres_*.py``, ``bench/case_*.py``) with ``git mv``, then rewrites every
reference to an old module path by the same table, in every tracked text file of the repository
(code, tests, compat, bench, docs, ``.ci``, ``pyproject.toml``):

- ``from offload import driver`` (a moved module imported from its package) becomes
  ``from offload.session import driver``, in code and in one-line imports inside strings and
  docs; a statement naming moved and unmoved modules is split,
  and a module whose last name changes keeps its local name with ``as`` (``from bench import
  case_cost`` becomes ``from bench.cases import cost as case_cost``), so no code below changes;
- any dotted path (``import offload.driver``, ``offload.driver.X`` in code, ``"offload.driver.X"``
  in ``mock.patch`` targets, ``python -m bench.case_bus`` in docs) is rewritten at its start;
  a dotted path followed by ``/`` is not a module (``"offload.result/1"`` is a schema name);
- a file path (``offload/driver.py``, ``bench/case_cost.py``) becomes the new file's path, and
  a PostgreSQL part named short in backticks (```postgres_sql```) its name in the package.

It runs on whatever tree it finds: on a newer main where other branches added code that uses
the old paths, it rewrites those too; a move whose old file is gone and new file exists is
skipped, so a second run changes nothing. It never edits code beyond paths, except the literal
``FIXUPS`` (paths computed from ``__file__`` in moved bench files). Finally it checks the
result (unless ``--no-check``): the old paths are named nowhere, every file compiles, every
module of ``offload`` and ``bench`` imports in a fresh interpreter, and
``tests/render/test_layering.py`` passes. Exit status 1 if a check fails.

Kept in the repository as the record of the moves (the lead may delete it once nothing in
flight uses the old paths).
"""
from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# old dotted module -> new dotted module. The root keeps the composition root (runtime, api,
# config, config_file) and what every layer uses (errors, home, ids, origin).
MOVES: dict[str, str] = {
    # what an owner process runs beside the engine
    "offload.owner_loop": "offload.owner.loop",
    "offload.activity": "offload.owner.activity",
    "offload.control_requests": "offload.owner.control_requests",
    "offload.journal": "offload.owner.journal",
    "offload.worker": "offload.owner.worker",
    "offload.local_worker": "offload.owner.local_worker",
    "offload.handover": "offload.owner.handover",
    "offload.home_worker": "offload.owner.home_worker",
    # the consumer side of one session
    "offload.conversation": "offload.session.conversation",
    "offload.driver": "offload.session.driver",
    "offload.inbox": "offload.session.inbox",
    "offload.session_units": "offload.session.units",
    # the read models the CLI, dashboard and MCP server show
    "offload.ledger_rows": "offload.views.rows",
    "offload.ledger_view": "offload.views.ledger",
    "offload.result": "offload.views.result",
    # who may reach offload's HTTP servers
    "offload.http_security": "offload.access.http",
    "offload.token_store": "offload.access.tokens",
    # the PostgreSQL transport, a package of its own (its parts by PATTERNS)
    "offload.ledger.postgres": "offload.ledger.postgres.ledger",
    # the offload command's own
    "offload.exit_codes": "offload.cli.exit_codes",
    "offload.storage_errors": "offload.cli.storage_errors",
    # bench: probes, profilers, the report
    "bench.baselines": "bench.cases.baselines",
    "bench.harness": "bench.cases.harness",
    "bench.ledger_fill": "bench.cases.ledger_fill",
    "bench.dbos_rig": "bench.cases.dbos_rig",
    "bench.step_loop": "bench.cases.step_loop",
    "bench.history_cost": "bench.probes.history_cost",
    "bench.mcp_waits": "bench.probes.mcp_waits",
    "bench.model_server_proc": "bench.probes.model_server_proc",
    "bench.owner_loop_cost": "bench.probes.owner_loop_cost",
    "bench.tracing_cost": "bench.probes.tracing_cost",
    "bench.worker_probe": "bench.probes.worker_probe",
    "bench.profile_cost": "bench.profilers.cost",
    "bench.profile_worker": "bench.profilers.worker",
    "bench.report": "bench.report.output",
    "bench.stats": "bench.report.stats",
    "bench.readme_table": "bench.report.readme_table",
}
# Patterns over the modules present when the script runs (new ones from other branches included).
PATTERNS: tuple[tuple[str, str], ...] = (
    (r"offload\.ledger\.postgres_(\w+)", r"offload.ledger.postgres.\1"),
    (r"bench\.case_(\w+)", r"bench.cases.\1"),
)
PACKAGES: dict[str, str] = {
    "offload/owner": "What an owner process runs beside its engine: the owner loop (control requests other\n"
                     "processes left, activity snapshots), the journal of its units, ``offload worker`` (the\n"
                     "home's background worker on SQLite too), and the hand-over of its work when it leaves.",
    "offload/session": "The consumer side of one session: its conversation (agent plus stored history), the\n"
                       "driver a frontend runs it with, its inbox of results and the units other processes run.",
    "offload/views": "Read models of the ledger for the CLI, the dashboard and the MCP server: the rows as\n"
                     "plain data, the ledger as listed, the result document. They read; they never write.",
    "offload/access": "Who may reach offload's HTTP servers (the dashboard, ``offload mcp --http``): the\n"
                      "home's access tokens and the Host and Origin checks against DNS rebinding.",
    "bench/cases": "The benchmark cases ``python -m bench`` runs (``case N`` in docs/benchmarks.md), and what\n"
                   "they share: the harness, case 1's baselines, case 3's pre-filled ledgers.",
    "offload/ledger/postgres": "The PostgreSQL transport of the ledger, for several processes on several hosts:\n"
                               "``ledger.PostgresLedger`` and its parts (connections, lease, functions, queue, ...).\n"
                               "Importing a part imports neither psycopg's pool nor the ledger class.",
    "bench/report": "What a run's figures become: spread and ratios, the rich tables and JSON, the docs table.",
    "bench/probes": "Measurements to rerun by hand, each its own ``python -m bench.probes.NAME``.",
    "bench/profilers": "Where the time goes: pyinstrument / CPU profiles, ``python -m bench.profilers.NAME``.",
}
# (new file, old text, new text): paths that a moved file computed from its own location.
FIXUPS: tuple[tuple[str, str, str], ...] = (
    ("bench/cases/fanout.py", "REPO_ROOT = Path(__file__).resolve().parent.parent",
     "REPO_ROOT = Path(__file__).resolve().parents[2]"),
    ("bench/report/readme_table.py", 'DEFAULT_JSON = Path(__file__).resolve().parent / "results"',
     'DEFAULT_JSON = Path(__file__).resolve().parents[1] / "results"'),
    # The layering test's table: a new package holds modules of two layers, so it names them.
    ("tests/render/test_layering.py", '    ("offload.gateway", 8, "gateway"),\n',
     '    # A package of issue 46 whose modules serve two layers: the app\'s named first, the rest\n'
     '    # and the package itself in the lower layer that imports it.\n'
     '    ("offload.owner.worker", 9, "app"),\n'
     '    ("offload.owner", 7, "runtime"),\n'
     '    ("offload.session.driver", 9, "app"),\n'
     '    ("offload.session.units", 9, "app"),\n'
     '    ("offload.session", 7, "runtime"),\n'
     '    ("offload.views.rows", 9, "app"),\n'
     '    ("offload.views.ledger", 9, "app"),\n'
     '    ("offload.views", 2, "render"),\n'
     '    ("offload.gateway", 8, "gateway"),\n'),
)
ROOTS = ("offload", "compat", "tests", "bench", "docs", ".ci", "scripts", "examples", "tools",
         "README.md", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt", ".sh", ".rst", ""}


def resolve_moves() -> dict[str, str]:
    """``MOVES`` plus every present module a pattern matches."""
    moves = dict(MOVES)
    for root in ("offload", "bench"):
        for path in (REPO / root).rglob("*.py"):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            for pattern, replacement in PATTERNS:
                if re.fullmatch(pattern, module):
                    moves[module] = re.sub(pattern, replacement, module)
    return moves


def file_moves(moves: dict[str, str]) -> list[tuple[Path, Path]]:
    """(old file, new file) for every move, present or done."""
    return [(REPO.joinpath(*old.split(".")).with_suffix(".py"), REPO.joinpath(*new.split(".")).with_suffix(".py"))
            for old, new in moves.items()]


def git(*args: str) -> None:
    subprocess.run(["git", *args], cwd=REPO, check=True)


def move_files(moves: dict[str, str]) -> None:
    for folder, doc in PACKAGES.items():
        init = REPO / folder / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{doc}\n"""\n', encoding="utf-8")
            git("add", str(init.relative_to(REPO)))
    for old, new in file_moves(moves):
        if old.exists() and not new.exists():
            new.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(old.relative_to(REPO)), str(new.relative_to(REPO)))
        elif old.exists():
            raise SystemExit(f"both {old.relative_to(REPO)} and {new.relative_to(REPO)} exist: merge them by hand")


def _dotted_patterns(moves: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    out = []
    for old in sorted(moves, key=len, reverse=True):
        # A module that became a package (offload.ledger.postgres): a path naming one of the
        # package's modules is new already, so neither this run nor a second one nests it.
        inside = {new[len(old) + 1:].split(".")[0] for new in moves.values() if new.startswith(old + ".")}
        folder = REPO.joinpath(*old.split("."))
        if inside and folder.is_dir():  # on a second run the package's modules are on disk only
            inside |= {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if p.is_dir()}
        inside = sorted(inside - {"__init__", "__pycache__"})
        guard = r"(?!\.(?:" + "|".join(map(re.escape, inside)) + r")(?![\w]))" if inside else ""
        out.append((re.compile(r"(?<![\w.])" + re.escape(old) + r"(?![\w/])" + guard), moves[old]))
    return out


def _path_patterns(moves: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    out = []
    for old, new in file_moves(moves):
        old_rel, new_rel = old.relative_to(REPO).as_posix(), new.relative_to(REPO).as_posix()
        out.append((re.compile(r"(?<![\w])" + re.escape(old_rel) + r"(?![\w])"), new_rel))
    return out


def _split_import(node: ast.ImportFrom, moves: dict[str, str]) -> list[str] | None:
    """``from P import a, b as c``, split by where each imported module now lives; None if none moved."""
    groups: dict[str, list[str]] = {}
    plain: list[str] = []
    moved = False
    for alias in node.names:
        full = f"{node.module}.{alias.name}"
        if full in moves:
            moved = True
            parent, name = moves[full].rsplit(".", 1)
            bound = alias.asname or alias.name
            if parent in moves:  # a package whose old module path is rewritten below: name the module whole
                plain.append(f"import {moves[full]} as {bound}")
            else:
                groups.setdefault(parent, []).append(name if name == bound else f"{name} as {bound}")
        else:
            groups.setdefault(node.module, []).append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
    if not moved:
        return None
    return [f"from {parent} import {', '.join(names)}" for parent, names in groups.items()] + plain


def rewrite_from_imports(text: str, moves: dict[str, str], where: str) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            print(f"warning: {where}:{node.lineno}: relative import left as is", file=sys.stderr)
            continue
        statements = _split_import(node, moves)
        if statements is not None:
            edits.append((node, statements))
    for node, statements in sorted(edits, key=lambda e: e[0].lineno, reverse=True):
        first, last = node.lineno - 1, node.end_lineno - 1
        head = lines[first][:node.col_offset]
        tail = lines[last][node.end_col_offset:]
        if head.strip() or any("#" in line for line in lines[first + 1:last]):
            print(f"warning: {where}:{node.lineno}: import rewritten, check its comments", file=sys.stderr)
        indent = head if not head.strip() else ""
        body = ("\n" + indent).join(statements)
        lines[first:last + 1] = [head + body + tail]
    return "".join(lines)


_FROM_LINE = re.compile(r"^([ \t]*)(from [\w.]+ import [\w ,]+?)[ \t]*$", re.MULTILINE)


def rewrite_from_lines(text: str, moves: dict[str, str]) -> str:
    """One-line from-imports the syntax tree does not see: in a string (code a test runs in a
    fresh interpreter), a docstring, a docs code block."""
    def replace(match: re.Match[str]) -> str:
        try:
            node = ast.parse(match.group(2)).body[0]
        except SyntaxError:
            return match.group(0)
        statements = _split_import(node, moves) if isinstance(node, ast.ImportFrom) else None
        return match.group(0) if statements is None else match.group(1) + ("\n" + match.group(1)).join(statements)
    return _FROM_LINE.sub(replace, text)


def _short_patterns(moves: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    """Prose that names a PostgreSQL module by its short name in backticks (```postgres_sql```,
    ```postgres.py```): the part's name in its package now."""
    parts = sorted(old.rsplit(".", 1)[1][len("postgres_"):] for old in moves
                   if old.startswith("offload.ledger.postgres_"))
    if not parts:
        return []
    names = "|".join(map(re.escape, parts))
    return [(re.compile(r"(?<=`)postgres_(" + names + r")\.py\b"), r"postgres/\1.py"),
            (re.compile(r"(?<=`)postgres_(" + names + r")(?![\w])"), r"postgres.\1"),
            (re.compile(r"(?<=`)postgres\.py\b"), "postgres/ledger.py")]


def rewrite_text(text: str, moves: dict[str, str], suffix: str, where: str) -> str:
    if suffix == ".py":
        text = rewrite_from_imports(text, moves, where)
    text = rewrite_from_lines(text, moves)
    if suffix in (".py", ".md"):
        for pattern, new in _short_patterns(moves):
            text = pattern.sub(new, text)
    for pattern, new in _dotted_patterns(moves) + _path_patterns(moves):
        text = pattern.sub(new, text)
    return text


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *ROOTS], cwd=REPO, check=True,
                         capture_output=True).stdout.decode().split("\0")
    me = Path(__file__).resolve()
    files = []
    for rel in filter(None, out):
        path = REPO / rel
        if path.suffix in TEXT_SUFFIXES and path.is_file() and path.resolve() != me:
            files.append(path)
    return files


def rewrite_all(moves: dict[str, str]) -> int:
    changed = 0
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite_text(text, moves, path.suffix, str(path.relative_to(REPO)))
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
    for rel, old, new in FIXUPS:
        path = REPO / rel
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if old in text and new not in text:
            path.write_text(text.replace(old, new), encoding="utf-8")
        elif new not in text:
            print(f"warning: {rel}: fix-up not applied, do it by hand: {new.strip()}", file=sys.stderr)
    return changed


def leftovers(moves: dict[str, str]) -> list[str]:
    """Lines that still name an old module or file path (none expected)."""
    patterns = [p for p, _ in _dotted_patterns(moves) + _path_patterns(moves)]
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in patterns):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def check(moves: dict[str, str]) -> bool:
    ok = True
    left = leftovers(moves)
    for line in left:
        print("old path still named:", line)
    ok &= not left
    python = sys.executable
    ok &= subprocess.run([python, "-m", "compileall", "-q", "offload", "compat", "tests", "bench", "tools"],
                         cwd=REPO).returncode == 0
    modules = sorted(".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
                     for root in ("offload", "bench") for p in (REPO / root).rglob("*.py")
                     if p.name != "__main__.py")
    script = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    ok &= subprocess.run([python, "-c", script, *modules], cwd=REPO).returncode == 0
    ok &= subprocess.run([python, "-m", "pytest", "-q", "-p", "no:randomly", "tests/render/test_layering.py"],
                         cwd=REPO).returncode == 0
    print("check:", "passed" if ok else "FAILED")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-only", action="store_true", help="move nothing, only check")
    parser.add_argument("--no-check", action="store_true", help="move and rewrite, skip the checks")
    args = parser.parse_args(argv)
    moves = resolve_moves()
    if not args.check_only:
        move_files(moves)
        print(f"rewrote {rewrite_all(moves)} files")
    return 0 if args.no_check or check(moves) else 1


if __name__ == "__main__":
    sys.exit(main())
