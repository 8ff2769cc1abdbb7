"""The Python examples run as written: README.md's first ```python block (its "Use it from
Python" example) and every ```python block of docs/python-api.md, each as a program of its own
in a subprocess with an empty ``HERMES_HOME``, no ``OFFLOAD_*``/``OPENAI_*`` variables (so no
API key) and stdin closed. Invariant: a block that exits non-zero fails with its output."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_code_blocks import ROOT, Block, blocks_of

BLOCK_TIMEOUT_S = 90.0
README_BLOCK = next(block for block in blocks_of(ROOT / "README.md") if block.language == "python")
API_BLOCKS = [block for block in blocks_of(ROOT / "docs" / "python-api.md") if block.language == "python"]


def test_the_readme_example_is_the_use_it_from_python_one():
    text = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    heading = text.index("## Use it from Python")
    assert heading < README_BLOCK.line, "README's first python block must be the 'Use it from Python' example"
    assert API_BLOCKS, "docs/python-api.md has no python example: is the parser broken?"


@pytest.mark.parametrize("block", [README_BLOCK, *API_BLOCKS], ids=lambda block: block.name)
def test_python_block_runs_as_written(block: Block, tmp_path):
    home = tmp_path / "empty-home"
    home.mkdir()
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OFFLOAD_", "OPENAI_", "HERMES_"))}
    env["HERMES_HOME"] = str(home)
    done = subprocess.run([sys.executable, "-c", block.text], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert done.returncode == 0, (f"{block.name} exited {done.returncode}\n--- block ---\n{block.text}\n"
                                  f"--- stdout ---\n{done.stdout}\n--- stderr ---\n{done.stderr}")
    assert "deleg_" in done.stdout or "[ASYNC DELEGATION" in done.stdout, done.stdout
