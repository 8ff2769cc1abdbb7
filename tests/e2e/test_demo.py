"""`offload demo`, as the README runs it: offline, exit 0, the whole story, well under a minute."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import cli_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _path_without_bwrap(tmp_path: Path) -> str:
    """A PATH of one folder linking every program of today's PATH except ``bwrap``: a fresh machine."""
    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for entry in (os.scandir(folder) if os.path.isdir(folder) else ()):
            target = bin_dir / entry.name
            if entry.name != "bwrap" and not target.exists() and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    return str(bin_dir)


@pytest.mark.parametrize("bwrap", ["installed", "absent"])
def test_demo_runs_offline_and_tells_the_whole_story(tmp_path, _isolated_hermes_home, bwrap):
    env = cli_env()
    if bwrap == "absent":
        env["PATH"] = _path_without_bwrap(tmp_path)
        assert shutil.which("bwrap", path=env["PATH"]) is None
    elif shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (.ci/services.d/35-bubblewrap.sh installs it)")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "offload", "demo"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=110, stdin=subprocess.DEVNULL)
    elapsed_s = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert elapsed_s < 60, f"the demo took {elapsed_s:.1f} s"
    assert "Traceback" not in out + done.stderr
    fan_out = [  # part 1; the two units may land in either order
        "demo-model (scripted, offline",                      # the model is labelled as a demo
        "delegated 3 task(s) in the background, reporting in 2 parts: ",  # a group plus an ungrouped task
        "background delegations",                             # the live roster while they run
        "landed: Subagent Task Completed: Run `python3 --version",
        "Ran `python3 --version && ls` for real",             # the terminal toolset really ran
        "Output: exit code: 0 Python 3.",                     # ... and its output is summarised
        "landed: Subagent Tasks Completed: compare (2 tasks)",
        "agent> Both comparisons are in.",                    # the parent answered the injected turn
    ]
    crash_in_order = [  # part 2
        "killed pid",                                         # SIGKILL mid-fan-out
        "queued to resume from its children's last steps",    # the restart took the dead owner's unit over
        "landed: Subagent Tasks Completed: drill (2 tasks)",  # ... and finished it
        "Counted the workspace: 3 files",                     # the finished child's real result
        "Resumed after the crash: the survey command was cut off",  # the unfinished one, resumed
        "agent> Recovered after the crash",
        "delivery 'delivered'",
        "demo finished in",
    ]
    fan_out.insert(1, "runs under bubblewrap" if bwrap == "installed" else "runs its fixed command unsandboxed")
    missing = [needle for needle in fan_out + crash_in_order if needle not in out]
    assert not missing, f"missing {missing} in:\n{out}"
    assert max(out.index(n) for n in fan_out) < out.index("killed pid")
    positions = [out.index(n) for n in crash_in_order]
    assert positions == sorted(positions), out
    assert not list(_isolated_hermes_home.iterdir()), "the demo must not touch the user's HERMES_HOME"
    assert "continue with: offload chat --resume" not in out  # its sessions lived in a temporary home, now gone
