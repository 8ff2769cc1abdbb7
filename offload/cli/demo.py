"""``offload demo``: the whole story offline in a few seconds, no API key.

1. Starts the scripted OpenAI-compatible server on 127.0.0.1 (``demo-model``: scripted, not a
   real model — see ``offload/demo_script.py``) and a temporary ``$HERMES_HOME``, so the
   user's real data is never touched.
2. A parent agent fans out three background subagents (a group "compare" of two, plus one
   ungrouped task that runs a real shell command with the terminal toolset); the live roster
   is shown while they run and each result is printed as it lands and is re-injected as a new
   turn the parent answers.
3. Crash drill: a second parent runs as ``offload run`` in its own process and fans out a
   quick and a slow child; once the ledger shows the quick child recorded, the process is
   SIGKILLed mid-fan-out. A fresh ``offload run --resume`` process then recovers the unit:
   the finished child keeps its real result, the other is reported unknown.

Invariant: every step waits on something observable (a turn returning, the ledger row, a
process exit) under a deadline, never on a fixed sleep, so the demo is as fast as the machine.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Callable, Iterator

import offload
from offload.config import write_config_file
from offload.testing.demo_script import CRASH_PROMPT, DEMO_MODEL, DEMO_MODEL_LABEL, DEMO_PROMPT, demo_script
from offload.session.driver import start_session
from offload.testing.model_server import ScriptedModelServer
from offload.cli.progress import RosterView
from offload.cli.views import READ_HINT_START, Ui, read_hint
from offload.ledger.queries import running_rows
from offload.runtime import Offload
from offload.toolsets.terminal_sandbox import no_sandbox_reason

DRILL_DEADLINE_S = 30.0
_ENV_OVERRIDES = ("OFFLOAD_MODEL", "OFFLOAD_BASE_URL", "OFFLOAD_API_KEY")
_WORKSPACE_FILES = {
    "notes.md": "# Config format decision\nWe need one format for service configs.\n",
    "settings.yaml": "service:\n  name: demo\n  replicas: 2\n",
    "settings.toml": "[service]\nname = \"demo\"\nreplicas = 2\n",
}


def run_demo(keep: bool = False) -> int:
    started = time.monotonic()
    with _demo_home(keep) as (home, workspace), ScriptedModelServer(demo_script, (DEMO_MODEL,)) as server:
        ui = Ui(read_hint=_read_hint(home, keep))
        ui.say("offload demo — offline, no API key", style="bold")
        ui.say(f"model server: {server.url} serving {DEMO_MODEL_LABEL}", style="yellow")
        ui.say(f"data: temporary HERMES_HOME {home} ({'kept' if keep else 'removed at the end'})", style="dim")
        write_config_file(home / "config.yaml", {
            "model": DEMO_MODEL, "base_url": server.url, "workspace": str(workspace),
            "toolsets": ["terminal", "file", "delegation"], "delegation": {"independent_completions": True, "resume": "auto"},
            "terminal": {"sandbox": _sandbox_mode(ui)}})
        with Offload(home=home) as off:
            _fan_out(ui, off)
            _crash_and_recover(ui, off, workspace)
    if not keep:
        ui.say("The demo's data was removed; `offload demo --keep` keeps it, to read each result again with "
               "`offload inbox --show ID`.", style="dim")
    ui.say(f"demo finished in {time.monotonic() - started:.1f} s. Next: point offload at a real model "
           "(docs/configuration.md) and run `offload chat`.", style="bold")
    return 0


def _sandbox_mode(ui: Ui) -> str:
    """``auto`` where a sandbox can run; else ``none``, said out loud: the demo's child runs only
    its fixed, scripted command (``python3 --version && ls``), so running it bare is safe here."""
    reason = no_sandbox_reason()
    if reason is None:
        ui.say("sandbox: the child's command runs under bubblewrap (terminal.sandbox: auto)", style="dim")
        return "auto"
    ui.say(f"sandbox: none — {reason}, so the demo's scripted child runs its fixed command unsandboxed. "
           "Real agents refuse to run commands here until you install bubblewrap or set terminal.sandbox "
           "none (docs/security.md).", style="yellow")
    return "none"


@contextlib.contextmanager
def _demo_home(keep: bool) -> Iterator[tuple[Path, Path]]:
    root = Path(tempfile.mkdtemp(prefix="offload-demo-"))
    home, workspace = root / "home", root / "workspace"
    home.mkdir(mode=0o700)
    workspace.mkdir()
    for name, text in _WORKSPACE_FILES.items():
        (workspace / name).write_text(text, encoding="utf-8")
    saved = {name: os.environ.get(name) for name in ("HERMES_HOME", *_ENV_OVERRIDES)}
    os.environ["HERMES_HOME"] = str(home)
    for name in _ENV_OVERRIDES:
        os.environ.pop(name, None)  # the demo always talks to its own scripted server
    try:
        yield home, workspace
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


# -- 1. fan-out with the live roster ------------------------------------------------------------
def _fan_out(ui: Ui, off: Offload) -> None:
    ui.say("\n1/2 background fan-out: a group 'compare' of two tasks, plus one terminal task", style="bold")
    driver = start_session(off, ui=ui)
    ui.answer(DEMO_PROMPT, label="you")
    driver.user_turn(DEMO_PROMPT)
    with RosterView(driver, snapshots=True) as view:
        driver.wait_for_background(on_wait=view.refresh)
    driver.conversation.store.close()


# -- 2. crash mid-fan-out, then restart ----------------------------------------------------------
def _crash_and_recover(ui: Ui, off: Offload, workspace: Path) -> None:
    ui.say("\n2/2 crash drill: a second parent, in its own process, fans out a quick and a slow task",
           style="bold")
    crashed = _spawn(["run", CRASH_PROMPT], ui, cwd=workspace)
    row = _wait_for_partial_row(off, crashed)
    crashed.kill()  # SIGKILL: no cleanup, no goodbye — as in a real crash
    crashed.wait(timeout=10)
    ui.say(f"killed pid {crashed.pid} with SIGKILL mid-fan-out: ledger row {row.delegation_id} still says "
           f"'running' with {len(row.result['results'])} of 2 children recorded", style="bold red")
    ui.say("restarting: a new `offload run --resume` process resumes the slow child from its last logged step "
           "(its cut-off command is not run again) and delivers the result", style="bold")
    restarted = _spawn(["run", "--resume", row.parent_session_id or row.origin_session], ui, cwd=workspace)
    if restarted.wait(timeout=DRILL_DEADLINE_S) != 0:
        raise RuntimeError(f"the restarted process exited with {restarted.returncode}")
    final = off.deliveries.get(row.delegation_id) or {}
    ui.say(f"ledger after the restart: {row.delegation_id} is '{final.get('state')}', delivery "
           f"'{final.get('delivery_state')}' — delivered once, and never replayed again", style="bold green")


def _spawn(args: list[str], ui: Ui, cwd: Path) -> subprocess.Popen[str]:
    root = str(Path(offload.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-m", "offload", *args], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8")
    threading.Thread(target=_echo, args=(proc.stdout, proc.pid, ui), daemon=True).start()
    return proc


def _read_hint(home: Path, keep: bool) -> Callable[[str], str | None]:
    """Only a kept home can be read after the demo, and only with its HERMES_HOME."""
    inbox = f"HERMES_HOME={shlex.quote(str(home))} offload inbox"
    return (lambda delegation_id: read_hint(delegation_id, inbox, in_chat=False)) if keep else (lambda _id: None)


def _echo(stream: IO[str], pid: int, ui: Ui) -> None:
    for line in stream:
        if line.startswith("done; continue with"):
            continue  # its --resume hint names a session in the demo's temporary home, removed at the end
        if line.startswith(READ_HINT_START):  # the child's hint names the user's inbox, not the demo's
            found = re.search(r"--show (\S+?)`", line)
            line = (ui.read_hint(found.group(1)) if found else None) or ""
            if not line:
                continue
        ui.say(f"  [pid {pid}] {line.rstrip()}", style="dim")


def _wait_for_partial_row(off: Offload, proc: subprocess.Popen[str]):
    """The drill's ledger row once its quick child is recorded and the slow one's command has its
    start mark in the step log (the command is still running then)."""
    deadline = time.monotonic() + DRILL_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the crash-drill process exited early with {proc.returncode}")
        for row in running_rows(off.ledger()):
            if (row.owner_pid == proc.pid and (row.result or {}).get("results")
                    and any(s.kind == "tool_start" for s in off.ledger().read_steps(row.delegation_id))):
                return row
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the crash drill did not record its quick child within {DRILL_DEADLINE_S:.0f} s")
