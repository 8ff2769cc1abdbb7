"""What the demo and the demo model tell a new user is true (issue 26, items 6, 7 and 13):
a call that reported in one unit is not told of "other units", the demo model's follow-up
answers what actually came back, and the demo's hint to re-read a result works."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import cli_env, offload

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

HANDLE = re.compile(r"delegated 3 task\(s\) in the background(?:, reporting in (\d) parts)?: (deleg_\w+)")


def _units(stderr: str) -> list[str]:
    match = HANDLE.search(stderr)
    assert match, stderr
    return re.findall(r"\b(deleg_[0-9a-f]+(?:-\d)?)\b", stderr[match.start():].splitlines()[0])


def test_a_call_in_one_unit_is_not_told_of_other_units_and_the_answer_covers_all_of_it():
    done = offload("run", "--demo-model", "Compare YAML and TOML, and check the Python version.")
    assert done.returncode == 0, done
    [unit] = _units(done.stdout + done.stderr)
    shown = offload("inbox", "--show", unit)
    assert shown.returncode == 0, shown
    assert "Other units of the same call" not in shown.stdout and "sibling units" not in shown.stdout
    assert "A background fan-out (3 subagents)" in shown.stdout
    follow_up = done.stdout.strip().splitlines()[-1]  # the answer to the one result: all three tasks
    assert "Both comparisons are in" in follow_up and "this machine runs Python" in follow_up, follow_up


def test_a_call_split_into_units_is_told_to_expect_the_others():
    assert offload("config", "set", "delegation.independent_completions", "true").returncode == 0
    done = offload("run", "--demo-model", "Compare YAML and TOML, and check the Python version.")
    assert done.returncode == 0, done
    units = _units(done.stdout + done.stderr)
    assert len(units) == 2, done.stderr
    for unit in units:
        shown = offload("inbox", "--show", unit).stdout
        assert "Other units of the same call report separately" in shown, shown


def _demo(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "offload", "demo", *args], capture_output=True, text=True,
                          env=cli_env(), cwd=cwd, timeout=110, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_demo_offers_no_command_that_cannot_work(tmp_path):
    out = _demo(cwd=tmp_path)
    assert "inbox --show deleg_" not in out  # its home is removed at the end
    assert "`offload demo --keep` keeps it" in out


def test_with_keep_the_demo_hint_reads_the_result(tmp_path):
    out = _demo("--keep", cwd=tmp_path)
    home = re.search(r"data: temporary HERMES_HOME (\S+) \(kept\)", out).group(1)
    try:
        hints = re.findall(r"`(HERMES_HOME=\S+ offload inbox --show deleg_\S+)`", out)
        assert len(hints) == 3, out  # two units of the fan-out, and the crash drill's replayed one
        for hint in hints:
            env_part, command = hint.split(" ", 1)
            shown = subprocess.run([sys.executable, "-m", "offload", *shlex.split(command)[1:]], capture_output=True,
                                   text=True, timeout=60, env=cli_env(HERMES_HOME=env_part.split("=", 1)[1]))
            assert shown.returncode == 0 and "[ASYNC DELEGATION" in shown.stdout, (hint, shown)
    finally:
        shutil.rmtree(Path(home).parent, ignore_errors=True)
