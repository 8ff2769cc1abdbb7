"""Walking the workspace for ``search_files`` and ``list_files``, and sniffing binary files.

Owns tree traversal for the file toolset.

Invariants:

* A walk never leaves the workspace through a symlink: folder symlinks are shown but never
  descended, and a file symlink is searched only if its target resolves inside the workspace.
* A walk given offload's home (a subagent's) neither searches nor lists anything in it.
* A walk checks ``interrupted`` between entries (a search also between lines), so a huge tree
  stops promptly; patterns are RE2's (``search_pattern``): no search can freeze the process.
* Results are capped by the caller's limits, and the text says when and how to narrow down.
"""
from __future__ import annotations

import codecs
import fnmatch
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from offload.toolsets.search_pattern import compile_search_pattern
from offload.toolsets.toolspec import ToolError
from offload.toolsets.workspace_paths import in_home, is_inside, relative_display

_SKIP_DIRS = frozenset({".git", ".hg", ".svn"})  # version-control internals: huge and never wanted
_SNIFF_BYTES = 8_192
_MAX_SHOWN_LINE_CHARS = 300
_MAX_SEARCHED_FILE_BYTES = 5_000_000


def looks_binary(path: Path) -> bool:
    """True if the start of the file has a NUL byte or is not valid UTF-8."""
    with open(path, "rb") as handle:
        sample = handle.read(_SNIFF_BYTES)
    if b"\x00" in sample:
        return True
    try:
        # final=False: a multi-byte character cut by the sample boundary is not an error.
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
    except UnicodeDecodeError:
        return True
    return False


# --- search --------------------------------------------------------------------------------


@dataclass
class _SearchStats:
    searched: int = 0
    skipped: int = 0  # binary, too big, unreadable, or a link leading out of the workspace
    capped: bool = False


def _candidate_files(workspace: Path, root: Path, glob: str | None, stats: _SearchStats,
                     home: Path | None) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not in_home(Path(dirpath) / d, home))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            shown = relative_display(workspace, path)
            if glob and not fnmatch.fnmatch(shown if "/" in glob else name, glob):
                continue
            if (path.is_symlink() and not is_inside(workspace, path)) or in_home(path, home):
                stats.skipped += 1
                continue
            yield path


def _search_file(path: Path, shown: str, regex: Any, results: list[str], max_results: int,
                 interrupted: threading.Event) -> bool:
    """Append matches from one file (``regex``: an RE2 pattern, linear in each line, so the
    interrupt checked per line is seen within a second); False if the file was skipped."""
    try:
        info = path.stat()
        # Only regular files: opening a FIFO would block the search forever.
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_SEARCHED_FILE_BYTES or looks_binary(path):
            return False
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                if interrupted.is_set():
                    raise ToolError(f"search_files: the agent was interrupted; the search stopped in {shown}.")
                text = line.rstrip("\r\n")
                if regex.search(text):
                    if len(text) > _MAX_SHOWN_LINE_CHARS:
                        text = text[:_MAX_SHOWN_LINE_CHARS] + " [...]"
                    results.append(f"{shown}:{number}: {text}")
                    if len(results) >= max_results:
                        break
    except OSError:
        return False
    return True


def search_tree(
    workspace: Path,
    root: Path,
    pattern: str,
    glob: str | None,
    ignore_case: bool,
    max_results: int,
    interrupted: threading.Event,
    home: Path | None = None,
) -> str:
    regex = compile_search_pattern(pattern, ignore_case)
    results: list[str] = []
    stats = _SearchStats()
    for path in _candidate_files(workspace, root, glob, stats, home):
        if interrupted.is_set():
            raise ToolError(f"search_files: the agent was interrupted; the search stopped after {stats.searched} files.")
        if _search_file(path, relative_display(workspace, path), regex, results, max_results, interrupted):
            stats.searched += 1
        else:
            stats.skipped += 1
        if len(results) >= max_results:
            stats.capped = True
            break
    return _format_search(results, stats, pattern, relative_display(workspace, root), max_results)


def _format_search(results: list[str], stats: _SearchStats, pattern: str, root_shown: str, max_results: int) -> str:
    skipped = (
        f"; {stats.skipped} skipped (binary, over {_MAX_SEARCHED_FILE_BYTES} bytes, unreadable, or a link out of the workspace)"
        if stats.skipped
        else ""
    )
    if not results:
        return f"No matches for {pattern!r} in {root_shown} ({stats.searched} files searched{skipped})."
    matches = f"{len(results)} match" + ("es" if len(results) != 1 else "")
    footer = f"[{matches} in {root_shown}; {stats.searched} files searched{skipped}]"
    if stats.capped:
        footer = f"[stopped at {max_results} matches; narrow the pattern, path or glob to see the rest{skipped}]"
    return "\n".join(results) + "\n" + footer


# --- list ----------------------------------------------------------------------------------


@dataclass
class _Listing:
    max_depth: int
    max_entries: int
    interrupted: threading.Event
    lines: list[str]
    entries: int = 0
    capped: bool = False
    home: Path | None = None  # offload's, hidden from a subagent


def _list_dir(folder: str, depth: int, listing: _Listing) -> None:
    indent = "  " * depth
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as exc:
        listing.lines.append(f"{indent}(unreadable: {exc.strerror or exc})")
        return
    if not entries and depth == 1:
        listing.lines.append(f"{indent}(empty)")
    for entry in entries:
        if listing.interrupted.is_set():
            raise ToolError("list_files: the agent was interrupted; the listing stopped.")
        if listing.entries >= listing.max_entries:
            listing.capped = True
            return
        listing.entries += 1
        if entry.is_symlink():
            # Shown, never followed: the target may lie outside the workspace.
            listing.lines.append(f"{indent}{entry.name} -> {os.readlink(entry.path)}")
        elif entry.is_dir(follow_symlinks=False):
            if in_home(Path(entry.path), listing.home):
                listing.lines.append(f"{indent}{entry.name}/ (offload's home: not shown to a subagent)")
                continue
            if entry.name in _SKIP_DIRS or depth >= listing.max_depth:
                listing.lines.append(f"{indent}{entry.name}/ (not expanded)")
                continue
            listing.lines.append(f"{indent}{entry.name}/")
            _list_dir(entry.path, depth + 1, listing)
            if listing.capped:
                return
        else:
            listing.lines.append(f"{indent}{entry.name}")


def list_tree(workspace: Path, root: Path, max_depth: int, max_entries: int, interrupted: threading.Event,
              home: Path | None = None) -> str:
    shown = relative_display(workspace, root)
    listing = _Listing(max_depth, max_entries, interrupted, lines=[f"{shown}/"], home=home)
    _list_dir(str(root), 1, listing)
    if listing.capped:
        listing.lines.append(
            f"[listing stopped at {max_entries} entries; list a subfolder or use a smaller max_depth]"
        )
    return "\n".join(listing.lines)
