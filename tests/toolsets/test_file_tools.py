"""The file toolset: workspace confinement (incl. symlinks), caps, and the model-facing errors."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from offload.toolsets.file_tools import TOOLS, list_files, patch_file, read_file, search_files, write_file
from offload.toolsets.toolspec import ToolContext, ToolError


def call(tool, ctx: ToolContext, **args: object) -> str:
    return tool.handler(dict(args), ctx)


def test_toolset_exports_five_file_tools() -> None:
    assert [t.name for t in TOOLS] == ["read_file", "write_file", "patch_file", "search_files", "list_files"]
    assert {t.toolset for t in TOOLS} == {"file"}


# --- confinement ----------------------------------------------------------------------------

ESCAPES = ["../outside/secret.txt", "sub/../../outside/secret.txt", "{outside}/secret.txt", "~/x", "/etc/passwd"]


@pytest.mark.parametrize("tool, extra", [(read_file, {}), (patch_file, {"old": "top", "new": "bottom"})])
@pytest.mark.parametrize("raw", ESCAPES)
def test_reading_tools_refuse_paths_outside(
    ctx: ToolContext, workspace: Path, outside: Path, tool, extra: dict, raw: str
) -> None:
    path = raw.format(outside=outside)
    with pytest.raises(ToolError) as caught:
        call(tool, ctx, path=path, **extra)
    message = str(caught.value)
    assert "outside the workspace" in message and path in message and str(workspace) in message
    assert (outside / "secret.txt").read_text() == "top secret\n"


@pytest.mark.parametrize("raw", ESCAPES)
def test_write_refuses_paths_outside(ctx: ToolContext, outside: Path, raw: str) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        call(write_file, ctx, path=raw.format(outside=outside), content="pwned")
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_symlinked_file_pointing_outside_is_refused(ctx: ToolContext, workspace: Path, outside: Path) -> None:
    (workspace / "innocent.txt").symlink_to(outside / "secret.txt")
    for tool, extra in [(read_file, {}), (write_file, {"content": "x"}), (patch_file, {"old": "top", "new": "x"})]:
        with pytest.raises(ToolError, match=r"resolves to .*outside the workspace"):
            call(tool, ctx, path="innocent.txt", **extra)
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_symlinked_folder_pointing_outside_is_refused(ctx: ToolContext, workspace: Path, outside: Path) -> None:
    (workspace / "data").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ToolError, match="outside the workspace"):
        call(write_file, ctx, path="data/new.txt", content="x")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(list_files, ctx, path="data")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(search_files, ctx, pattern="secret", path="data")
    assert not (outside / "new.txt").exists()


def test_dangling_symlink_to_outside_is_not_written_through(ctx: ToolContext, workspace: Path, outside: Path) -> None:
    (workspace / "later.txt").symlink_to(outside / "created-later.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(write_file, ctx, path="later.txt", content="x")
    assert not (outside / "created-later.txt").exists()


def test_symlinks_inside_the_workspace_are_fine(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "real.txt").write_text("hello\n")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    assert call(read_file, ctx, path="alias.txt").endswith("hello\n")


def test_absolute_path_inside_workspace_is_allowed(ctx: ToolContext, workspace: Path) -> None:
    call(write_file, ctx, path=str(workspace / "abs.txt"), content="ok")
    assert (workspace / "abs.txt").read_text() == "ok"


# --- read_file ----------------------------------------------------------------------------------


def test_read_whole_file_and_a_range(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    assert call(read_file, ctx, path="a.txt") == "[a.txt: lines 1-10 of 10]\n" + "".join(
        f"line {n}\n" for n in range(1, 11)
    )
    assert call(read_file, ctx, path="a.txt", start_line=3, end_line=4) == "[a.txt: lines 3-4 of 10]\nline 3\nline 4\n"
    assert call(read_file, ctx, path="a.txt", start_line=9, end_line=99).endswith("line 9\nline 10\n")


def test_read_cap_cuts_and_says_where_to_resume(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"file_read_cap_bytes": 1000})
    (workspace / "big.txt").write_text("".join(f"{n:09d}\n" for n in range(1, 501)))  # 10 bytes a line
    result = call(read_file, ctx, path="big.txt")
    assert result.startswith("[big.txt: lines 1-100 of 500]\n")
    assert "000000100\n" in result and "000000101" not in result
    assert "read on with start_line=101" in result
    resumed = call(read_file, ctx, path="big.txt", start_line=101)
    assert resumed.startswith("[big.txt: lines 101-200 of 500]\n000000101\n")


def test_read_cap_cuts_a_single_long_line(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"file_read_cap_bytes": 1000})
    (workspace / "min.js").write_text("é" * 5000)  # 2 bytes a character: cut must not split one
    result = call(read_file, ctx, path="min.js")
    body = result.split("\n", 1)[1].split("\n[cut at", 1)[0]
    assert body == "é" * 500


@pytest.mark.parametrize(
    "args, message",
    [
        ({"path": "a.txt", "start_line": 5, "end_line": 2}, "before start_line"),
        ({"path": "a.txt", "start_line": 50}, "past the end"),
        ({"path": "a.txt", "start_line": 0}, "between 1 and"),
        ({"path": "nope.txt"}, "does not exist"),
        ({"path": "."}, "is a folder"),
        ({"path": "a.txt", "lines": "1-3"}, "unknown argument"),
        ({}, "'path' is required"),
    ],
)
def test_read_errors_are_explained(ctx: ToolContext, workspace: Path, args: dict, message: str) -> None:
    (workspace / "a.txt").write_text("one\ntwo\n")
    with pytest.raises(ToolError, match=message):
        read_file.handler(args, ctx)


def test_read_empty_file(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "empty").write_text("")
    assert call(read_file, ctx, path="empty") == "[empty: empty file]"


@pytest.mark.parametrize("data", [b"PNG\x00\x01\x02binary", b"caf\xe9 latin-1 text"])
def test_binary_files_are_refused(ctx: ToolContext, workspace: Path, data: bytes) -> None:
    (workspace / "blob.bin").write_bytes(data)
    with pytest.raises(ToolError, match="binary file"):
        call(read_file, ctx, path="blob.bin")
    with pytest.raises(ToolError, match="binary file"):
        call(patch_file, ctx, path="blob.bin", old="PNG", new="GIF")
    assert (workspace / "blob.bin").read_bytes() == data


# --- write_file and patch_file ------------------------------------------------------------------


def test_write_creates_parents_and_overwrites(ctx: ToolContext, workspace: Path) -> None:
    assert call(write_file, ctx, path="deep/er/f.txt", content="héllo") == "created deep/er/f.txt (6 bytes)"
    assert call(write_file, ctx, path="deep/er/f.txt", content="") == "overwrote deep/er/f.txt (0 bytes)"
    assert (workspace / "deep" / "er" / "f.txt").read_text() == ""


def test_write_to_a_folder_is_refused(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "d").mkdir()
    for path in ("d", "."):
        with pytest.raises(ToolError, match="is a folder"):
            call(write_file, ctx, path=path, content="x")


def test_patch_replaces_a_unique_match_and_keeps_crlf(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    assert call(patch_file, ctx, path="w.txt", old="beta", new="BETA") == (
        "patched w.txt: replaced 1 occurrence starting on line 2"
    )
    assert (workspace / "w.txt").read_bytes() == b"alpha\r\nBETA\r\ngamma\r\n"


def test_patch_not_found_and_not_unique(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "p.py").write_text("x = 1\ny = 1\nz = 1\n")
    with pytest.raises(ToolError, match="not found"):
        call(patch_file, ctx, path="p.py", old="w = 1", new="w = 2")
    with pytest.raises(ToolError, match=r"occurs 3 times .*lines 1, 2, 3"):
        call(patch_file, ctx, path="p.py", old=" = 1", new=" = 2")
    with pytest.raises(ToolError, match="'old' is empty"):
        call(patch_file, ctx, path="p.py", old="", new="x")
    assert (workspace / "p.py").read_text() == "x = 1\ny = 1\nz = 1\n"


def test_patch_counts_overlapping_matches(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "o.txt").write_text("aaa")
    with pytest.raises(ToolError, match="occurs 2 times"):
        call(patch_file, ctx, path="o.txt", old="aa", new="b")


# --- search_files --------------------------------------------------------------------------------


@pytest.fixture
def tree(workspace: Path, outside: Path) -> Path:
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "mod.py").write_text("import os\n\ndef Secret():\n    return 'top secret'\n")
    (workspace / "src" / "notes.md").write_text("a secret plan\n")
    (workspace / "image.png").write_bytes(b"\x89PNG\x00secret")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("secret in git\n")
    (workspace / "leak.txt").symlink_to(outside / "secret.txt")
    (workspace / "outlink").symlink_to(outside, target_is_directory=True)
    return workspace


def test_search_reports_path_line_text(ctx: ToolContext, tree: Path) -> None:
    result = call(search_files, ctx, pattern=r"secret")
    lines = result.splitlines()
    assert lines[:2] == ["src/notes.md:1: a secret plan", "src/pkg/mod.py:4:     return 'top secret'"]
    assert "2 matches" in lines[2]
    # .git, the binary file and both links out of the workspace were not read
    assert "git" not in result.split("[")[0] and "png" not in result and "leak" not in result
    assert "skipped" in lines[2]


def test_search_glob_case_and_subfolder(ctx: ToolContext, tree: Path) -> None:
    assert call(search_files, ctx, pattern="secret", glob="*.py", ignore_case=True).splitlines()[:2] == [
        "src/pkg/mod.py:3: def Secret():",
        "src/pkg/mod.py:4:     return 'top secret'",
    ]
    assert call(search_files, ctx, pattern="import", path="src/pkg").startswith("src/pkg/mod.py:1: import os")
    assert call(search_files, ctx, pattern="nomatch").startswith("No matches for 'nomatch' in .")


@pytest.mark.timeout(20)
def test_pipes_are_never_opened(ctx: ToolContext, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    (workspace / "real.txt").write_text("needle\n")
    assert call(search_files, ctx, pattern="needle").startswith("real.txt:1: needle\n[1 match in .; 1 files searched; 1 skipped")
    with pytest.raises(ToolError, match="not a regular file"):
        call(read_file, ctx, path="pipe")


def test_search_is_capped(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"file_search_max_results": 5})
    (workspace / "many.txt").write_text("hit\n" * 50)
    lines = call(search_files, ctx, pattern="hit").splitlines()
    assert len(lines) == 6 and lines[-1].startswith("[stopped at 5 matches")


def test_search_bad_regex_is_explained(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"not a valid regular expression \(missing \): \(unclosed\); patterns are RE2"):
        call(search_files, ctx, pattern="(unclosed")


@pytest.mark.parametrize("pattern,construct,instead", [
    (r"(a)\1", "a backreference", "search for the text itself"),
    (r"(?P<w>a)(?P=w)", "a backreference", "search for the text itself"),
    (r"foo(?=bar)", "a lookahead", "match the following text"),
    (r"foo(?!bar)", "a negative lookahead", "leave the unwanted hits out"),
    (r"(?<=x)foo", "a lookbehind", "match the preceding text"),
    (r"(?<!x)foo", "a lookbehind", "match the preceding text"),
    (r"a++", "a possessive quantifier", "drop the trailing +"),
])
def test_search_names_what_the_linear_engine_does_not_support(ctx: ToolContext, pattern: str, construct: str,
                                                              instead: str) -> None:
    with pytest.raises(ToolError) as raised:
        call(search_files, ctx, pattern=pattern)
    message = str(raised.value)
    assert f"uses {construct}" in message and instead in message and "no backreferences" in message, message


def test_search_refuses_a_pattern_too_large_to_run(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="too large to run"):
        call(search_files, ctx, pattern="((a{100}){100}){100}")
    with pytest.raises(ToolError, match="over 2000; search for a shorter"):
        call(search_files, ctx, pattern="a" * 2001)


@pytest.mark.timeout(10)
def test_a_catastrophic_pattern_runs_in_linear_time(ctx: ToolContext, workspace: Path) -> None:
    """``(a+)+$`` on 41 a's and a mismatch: minutes inside Python's re (holding the GIL)."""
    (workspace / "bomb.txt").write_text("a" * 41 + "!\n" + "a" * 100_000 + "!\n" + "aaa\n")
    started = time.monotonic()
    assert call(search_files, ctx, pattern="(a+)+$").startswith("bomb.txt:3: aaa\n[1 match")
    assert time.monotonic() - started < 2


def test_search_matches_python_regex_basics(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "m.py").write_text("def alpha(x):\n    return x  # TODO\nclass Beta:\n")
    assert call(search_files, ctx, pattern=r"^def \w+\(").startswith("m.py:1: def alpha(x):")
    assert call(search_files, ctx, pattern=r"TODO$").startswith("m.py:2:")  # $ at the line's end, as with re
    assert call(search_files, ctx, pattern=r"(?i)^class beta").startswith("m.py:3:")
    assert call(search_files, ctx, pattern=r"(?P<name>Beta)").startswith("m.py:3:")


def test_search_stops_when_interrupted(ctx: ToolContext, tree: Path) -> None:
    ctx.interrupted.set()
    with pytest.raises(ToolError, match="interrupted"):
        call(search_files, ctx, pattern="x")


# --- list_files ----------------------------------------------------------------------------------


def test_list_tree_shows_links_without_following(ctx: ToolContext, tree: Path) -> None:
    assert call(list_files, ctx).splitlines() == [
        "./",
        "  .git/ (not expanded)",
        "  image.png",
        f"  leak.txt -> {tree.parent / 'outside' / 'secret.txt'}",
        f"  outlink -> {tree.parent / 'outside'}",
        "  src/",
        "    notes.md",
        "    pkg/",
        "      mod.py",
    ]


def test_list_depth_and_cap(workspace: Path, tree: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"file_list_max_entries": 3})
    assert call(list_files, ctx, path="src", max_depth=1).splitlines() == ["src/", "  notes.md", "  pkg/ (not expanded)"]
    capped = call(list_files, ctx).splitlines()
    assert capped[1:4] == ["  .git/ (not expanded)", "  image.png", f"  leak.txt -> {tree.parent / 'outside' / 'secret.txt'}"]
    assert capped[-1].startswith("[listing stopped at 3 entries")


def test_list_errors(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "f.txt").write_text("x")
    with pytest.raises(ToolError, match="is a file"):
        call(list_files, ctx, path="f.txt")
    with pytest.raises(ToolError, match="does not exist"):
        call(list_files, ctx, path="missing")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(list_files, ctx, path="..")
    assert call(list_files, ctx, path=".").splitlines() == ["./", "  f.txt"]


@pytest.mark.timeout(20)
def test_patch_counts_a_flood_of_matches_in_linear_time(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "flood.txt").write_text("a\n" * 2_000_000)
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"occurs over 1000 times .* lines 1, 2, 3"):
        call(patch_file, ctx, path="flood.txt", old="a", new="b")
    assert time.monotonic() - started < 5


def test_write_refuses_a_pipe_instead_of_waiting_for_a_reader(ctx: ToolContext, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        call(write_file, ctx, path="pipe", content="x")
