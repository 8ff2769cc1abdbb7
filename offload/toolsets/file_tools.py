"""The ``file`` toolset: read, write, patch, search and list files in the task's workspace.

Owns the file tools' handlers and schemas. Search and listing walk the tree in
``offload/toolsets/file_walk.py``; path confinement lives in ``offload/toolsets/workspace_paths.py``.

Invariants:

* Every path is resolved (symlinks, ``..``, absolute paths) and must lie inside the workspace,
  or the call fails with a ``ToolError`` naming the path and the workspace. Nothing is read or
  written before that check.
* Only UTF-8 text is shown or patched; binary files are refused with a message, never dumped.
* Every result is capped (bytes read, matches, entries) and says when it was cut and how to see
  more.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from offload.toolsets.file_walk import list_tree, looks_binary, search_tree
from offload.toolsets.search_pattern import SYNTAX_NOTE
from offload.toolsets.tool_args import (
    optional_bool,
    optional_int,
    optional_str,
    reject_unknown,
    require_str,
    setting_int,
)
from offload.toolsets.toolspec import Tool, ToolContext, ToolError
from offload.toolsets.workspace_paths import protected_home, relative_display, resolve_inside, workspace_root

DEFAULT_READ_CAP_BYTES = 100_000
DEFAULT_SEARCH_MAX_RESULTS = 200
DEFAULT_LIST_MAX_ENTRIES = 500
_MAX_LINE = 10**9
_MAX_MATCHES = 1_000  # patch_file: occurrences counted before "not unique" is certain enough
_MAX_PATCH_BYTES = 50_000_000  # patch_file reads the whole file into memory


def _existing_file(ctx: ToolContext, args: dict[str, Any], tool: str) -> tuple[Path, Path, str]:
    workspace = workspace_root(ctx)
    raw = require_str(args, "path", tool)
    target = resolve_inside(workspace, raw, tool, protected_home(ctx))
    if target.is_dir():
        raise ToolError(f"{tool}: '{raw}' is a folder, not a file; use list_files to see what is in it.")
    if not target.exists():
        raise ToolError(f"{tool}: '{raw}' does not exist in the workspace; check the name with list_files.")
    if not target.is_file():  # a FIFO or device would block or never end
        raise ToolError(f"{tool}: '{raw}' is not a regular file (a pipe, socket or device), so it is not read.")
    try:
        binary = looks_binary(target)
    except OSError as exc:
        raise ToolError(f"{tool}: cannot read '{raw}': {exc.strerror or exc}.") from exc
    if binary:
        raise ToolError(
            f"{tool}: '{raw}' looks like a binary file (not UTF-8 text), so it is not shown. "
            "Inspect it with run_command and a tool made for its format (e.g. file, xxd | head, unzip -l)."
        )
    return workspace, target, relative_display(workspace, target)


# --- read_file ---------------------------------------------------------------------------


def _read_lines(target: Path, start: int, end: int, cap_bytes: int) -> tuple[str, int, int, int | None]:
    """Lines ``start..end`` (1-based, inclusive) within ``cap_bytes``.

    Returns (text, total line count, last line shown (possibly partly), line where the cap cut in).
    """
    kept: list[str] = []
    used_bytes, total, last_shown = 0, 0, start - 1
    cut_line: int | None = None
    with target.open("r", encoding="utf-8", errors="replace", newline="") as handle:
        for number, line in enumerate(handle, start=1):
            total = number
            if number < start or number > end or cut_line is not None:
                continue
            encoded = line.encode("utf-8")
            room = cap_bytes - used_bytes
            if len(encoded) > room:
                cut_line = number
                if room > 0:  # show what fits of the line, cut on a character boundary
                    kept.append(encoded[:room].decode("utf-8", errors="ignore"))
                    last_shown = number
                continue
            kept.append(line)
            used_bytes += len(encoded)
            last_shown = number
    return "".join(kept), total, last_shown, cut_line


def read_file_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    tool = "read_file"
    reject_unknown(args, ("path", "start_line", "end_line"), tool)
    _, target, shown = _existing_file(ctx, args, tool)
    start = optional_int(args, "start_line", tool, minimum=1, maximum=_MAX_LINE) or 1
    end = optional_int(args, "end_line", tool, minimum=1, maximum=_MAX_LINE) or _MAX_LINE
    if end < start:
        raise ToolError(f"{tool}: end_line {end} is before start_line {start}; give start_line <= end_line.")
    cap_bytes = setting_int(ctx.settings, "file_read_cap_bytes", DEFAULT_READ_CAP_BYTES, minimum=1_000, maximum=10_000_000)
    body, total, last_shown, cut_line = _read_lines(target, start, end, cap_bytes)
    if total == 0:
        return f"[{shown}: empty file]"
    if start > total:
        raise ToolError(f"{tool}: start_line {start} is past the end of '{shown}', which has {total} lines.")
    text = f"[{shown}: lines {start}-{last_shown} of {total}]\n{body}"
    if cut_line is not None:
        text += (
            f"\n[cut at the {cap_bytes}-byte read cap; read on with start_line={cut_line}. A single line "
            "longer than the cap stays cut: use run_command (e.g. cut -c) for such lines]"
        )
    return text


# --- write_file and patch_file ------------------------------------------------------------


def write_file_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    tool = "write_file"
    reject_unknown(args, ("path", "content"), tool)
    workspace = workspace_root(ctx)
    raw = require_str(args, "path", tool)
    content = require_str(args, "content", tool, allow_empty=True)
    target = resolve_inside(workspace, raw, tool, protected_home(ctx))
    if target == workspace or target.is_dir():
        raise ToolError(f"{tool}: '{raw}' is a folder; give a file path inside it.")
    existed = target.exists()
    if existed and not target.is_file():  # opening a FIFO for writing waits for a reader forever
        raise ToolError(f"{tool}: '{raw}' is not a regular file (a pipe, socket or device), so it is not written.")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        target.write_bytes(data)
    except OSError as exc:
        raise ToolError(f"{tool}: could not write '{raw}': {exc.strerror or exc}.") from exc
    verb = "overwrote" if existed else "created"
    return f"{verb} {relative_display(workspace, target)} ({len(data)} bytes)"


def _match_lines(text: str, old: str) -> list[int]:
    """1-based line numbers of the occurrences of ``old``, overlapping ones included, at most
    ``_MAX_MATCHES + 1`` of them (enough to say it is not unique), in time linear in ``text``:
    a one-character ``old`` in a large file must not hold the interpreter for minutes."""
    lines: list[int] = []
    line, counted_to = 1, 0
    index = text.find(old)
    while index != -1 and len(lines) <= _MAX_MATCHES:
        line += text.count("\n", counted_to, index)
        counted_to = index
        lines.append(line)
        index = text.find(old, index + 1)
    return lines


def patch_file_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    tool = "patch_file"
    reject_unknown(args, ("path", "old", "new"), tool)
    _, target, shown = _existing_file(ctx, args, tool)
    old = require_str(args, "old", tool, allow_empty=True)
    new = require_str(args, "new", tool, allow_empty=True)
    if not old:
        raise ToolError(f"{tool}: 'old' is empty; give the exact text to replace (use write_file to create a file).")
    size_bytes = target.stat().st_size
    if size_bytes > _MAX_PATCH_BYTES:
        raise ToolError(f"{tool}: '{shown}' is {size_bytes} bytes, over {_MAX_PATCH_BYTES}; patch_file works on "
                        "text files of a normal size (use run_command with a stream editor for a huge one).")
    try:
        text = target.read_bytes().decode("utf-8")  # bytes keep CRLF line endings as they are
    except UnicodeDecodeError as exc:
        raise ToolError(f"{tool}: '{shown}' is not valid UTF-8 text, so it cannot be patched safely.") from exc
    matches = _match_lines(text, old)
    if not matches:
        raise ToolError(
            f"{tool}: the 'old' text was not found in '{shown}'. Read the file and copy the exact text, "
            "including whitespace and indentation."
        )
    if len(matches) > 1:
        where = ", ".join(str(n) for n in matches[:10]) + (", ..." if len(matches) > 10 else "")
        raise ToolError(
            f"{tool}: the 'old' text occurs {'over ' + str(_MAX_MATCHES) if len(matches) > _MAX_MATCHES else len(matches)} "
            f"times in '{shown}' (starting on lines {where}); "
            "include more surrounding lines so it matches exactly once."
        )
    target.write_bytes(text.replace(old, new, 1).encode("utf-8"))
    return f"patched {shown}: replaced 1 occurrence starting on line {matches[0]}"


# --- search_files and list_files -----------------------------------------------------------


def _existing_folder_or_file(ctx: ToolContext, args: dict[str, Any], tool: str) -> tuple[Path, Path]:
    workspace = workspace_root(ctx)
    raw = optional_str(args, "path", tool) or "."
    root = resolve_inside(workspace, raw, tool, protected_home(ctx))
    if not root.exists():
        raise ToolError(f"{tool}: '{raw}' does not exist in the workspace; check the name with list_files.")
    return workspace, root


def search_files_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    tool = "search_files"
    reject_unknown(args, ("pattern", "path", "glob", "ignore_case"), tool)
    pattern = require_str(args, "pattern", tool)
    glob = optional_str(args, "glob", tool)
    ignore_case = optional_bool(args, "ignore_case", tool, default=False)
    workspace, root = _existing_folder_or_file(ctx, args, tool)
    max_results = setting_int(
        ctx.settings, "file_search_max_results", DEFAULT_SEARCH_MAX_RESULTS, minimum=1, maximum=10_000
    )
    return search_tree(workspace, root, pattern, glob, ignore_case, max_results, ctx.interrupted, protected_home(ctx))


def list_files_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    tool = "list_files"
    reject_unknown(args, ("path", "max_depth"), tool)
    workspace, root = _existing_folder_or_file(ctx, args, tool)
    if not root.is_dir():
        raise ToolError(f"{tool}: '{relative_display(workspace, root)}' is a file; use read_file to see it.")
    max_depth = optional_int(args, "max_depth", tool, minimum=1, maximum=20) or 3
    max_entries = setting_int(ctx.settings, "file_list_max_entries", DEFAULT_LIST_MAX_ENTRIES, minimum=1, maximum=100_000)
    return list_tree(workspace, root, max_depth, max_entries, ctx.interrupted, protected_home(ctx))


# --- tool definitions ------------------------------------------------------------------------

_PATH = {"type": "string", "description": "Path inside the workspace (relative paths start at the workspace)."}

read_file = Tool(
    name="read_file",
    toolset="file",
    description=(
        "Read a UTF-8 text file from the workspace, optionally only lines start_line..end_line "
        "(1-based, inclusive). Long files are cut at a size cap; the result says where to read on."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": _PATH,
            "start_line": {"type": "integer", "minimum": 1, "description": "First line to show (default 1)."},
            "end_line": {"type": "integer", "minimum": 1, "description": "Last line to show (default: end of file)."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    handler=read_file_handler,
    read_only=True,
)

write_file = Tool(
    name="write_file",
    toolset="file",
    description="Create or overwrite a text file in the workspace with the given content; missing folders are created.",
    parameters={
        "type": "object",
        "properties": {"path": _PATH, "content": {"type": "string", "description": "The whole new file content."}},
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    handler=write_file_handler,
)

patch_file = Tool(
    name="patch_file",
    toolset="file",
    description=(
        "Replace one exact occurrence of 'old' with 'new' in a workspace file. 'old' must match the "
        "file exactly (whitespace included) and occur exactly once; add surrounding lines if it is not unique."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": _PATH,
            "old": {"type": "string", "description": "Exact text to replace; must occur exactly once."},
            "new": {"type": "string", "description": "Replacement text (may be empty to delete)."},
        },
        "required": ["path", "old", "new"],
        "additionalProperties": False,
    },
    handler=patch_file_handler,
)

search_files = Tool(
    name="search_files",
    toolset="file",
    description=(
        "Search text files under a workspace folder for a regular expression (RE2 syntax: like Python's, "
        "but no backreferences and no lookahead/lookbehind); returns 'path:line: text' for each matching "
        "line, capped."
    ),
    parameters={
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": f"Regular expression: {SYNTAX_NOTE}."},
            "path": {"type": "string", "description": "Folder (or single file) to search; default the workspace."},
            "glob": {"type": "string", "description": "Only files whose name matches this glob, e.g. '*.py'."},
            "ignore_case": {"type": "boolean", "description": "Match case-insensitively (default false)."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    handler=search_files_handler,
    read_only=True,
)

list_files = Tool(
    name="list_files",
    toolset="file",
    description="List a workspace folder as an indented tree (folders end with '/'), capped in depth and entries.",
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Folder to list; default the workspace."},
            "max_depth": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Levels to expand (default 3)."},
        },
        "additionalProperties": False,
    },
    handler=list_files_handler,
    read_only=True,
)

TOOLS = [read_file, write_file, patch_file, search_files, list_files]
