"""The code blocks of README.md and docs/*.md run as written, so the pages cannot drift from the product.

Every fenced block names its language. A shell block (``bash``, ``sh``, ``console``) or a
``python`` block is RUN, unless the line just before its fence (blank lines aside) is
``<!-- not-run: REASON -->`` —
for blocks that need a real service or API key, install packages, serve until Ctrl-C or would
recurse into this test run; those are reported as skipped with their reason. Any other
language (``text`` for illustrations, ``yaml``, …) is not code to run.

A block runs with ``bash -e -o pipefail`` (python: this interpreter) in a fresh directory (``.venv`` there is this
interpreter's environment, so ``.venv/bin/offload`` works), with a temporary ``HERMES_HOME``,
no user ``OFFLOAD_*``/``OPENAI_*`` variables, stdin closed, and ``OFFLOAD_BASE_URL`` /
``OFFLOAD_MODEL`` / ``OFFLOAD_API_KEY`` pointing at the demo's scripted loopback model server:
offline, whatever model or endpoint the block configures. Invariant: a block that exits
non-zero fails the test with its output.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from offload.testing.demo_script import DEMO_MODEL, demo_script
from offload.testing.model_server import ScriptedModelServer

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
RUNNERS = {**{language: ["bash", "-e", "-o", "pipefail", "-c"] for language in SHELL_LANGUAGES},
           "python": [sys.executable, "-c"]}
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")  # indented: inside a list item
NOT_RUN = re.compile(r"^<!--\s*not-run:(?P<reason>.*?)-->\s*$")
BLOCK_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    not_run: str | None  # the marker's reason, or None: run it

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _marker_before(lines: list[str], fence_index: int) -> str | None:
    """The not-run reason on the last non-blank line before the fence, if there is one."""
    for line in reversed(lines[:fence_index]):
        if line.strip():
            match = NOT_RUN.match(line.strip())
            return match["reason"].strip() if match else None
    return None


def blocks_of(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if lines[i].strip() == opening["fence"]), None)
        assert end is not None, f"{page.relative_to(ROOT)}:{index + 1}: the code block is never closed"
        info, indent = opening["info"].strip().split(), len(opening["indent"])
        text = "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines[index + 1:end])
        yield Block(page, index + 1, info[0] if info else "", text, _marker_before(lines, index))
        index = end + 1


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]
RUNNABLE = [block for block in ALL_BLOCKS if block.language in RUNNERS]


def test_every_block_says_what_it_is():
    """A fence without a language could be either; a not-run marker must say why and sit on a runnable block."""
    unnamed = [block.name for block in ALL_BLOCKS if not block.language]
    assert not unnamed, f"code blocks without a language (write ```text for an illustration): {unnamed}"
    stray = [block.name for block in ALL_BLOCKS if block.not_run is not None and block.language not in RUNNERS]
    assert not stray, f"not-run markers on blocks that are never run anyway (remove them): {stray}"
    bare = [block.name for block in RUNNABLE if block.not_run == ""]
    assert not bare, f"not-run markers without a reason (<!-- not-run: WHY -->): {bare}"
    assert any(block.not_run is None for block in RUNNABLE), "no runnable block found: is the parser broken?"


@pytest.fixture(scope="module")
def demo_server() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer(demo_script, (DEMO_MODEL,)).start()
    yield server
    server.stop()


def _environment(home: Path, server: ScriptedModelServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "OPENAI_", "HERMES_"))}
    env.update(HERMES_HOME=str(home), OFFLOAD_BASE_URL=server.url, OFFLOAD_MODEL=DEMO_MODEL,
               OFFLOAD_API_KEY="offline-docs-check", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    return env


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.name for block in RUNNABLE])
def test_block_runs(block: Block, tmp_path, demo_server):
    if block.not_run is not None:
        pytest.skip(f"marked not-run: {block.not_run}")
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    done = subprocess.run([*RUNNERS[block.language], block.text], cwd=workdir,
                          env=_environment(tmp_path / "home", demo_server), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert done.returncode == 0, (f"{block.name} exited {done.returncode}\n--- block ---\n{block.text}\n"
                                  f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}")
