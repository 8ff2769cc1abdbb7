"""The ``terminal`` toolset: run one shell command inside the task's workspace.

Owns the lifetime of the command's processes. The command runs as ``/bin/sh -c COMMAND`` in a
new session (so in its own process group), with stdin closed and stdout+stderr merged into one
pipe, from the workspace (or a folder inside it).

Invariants:

* When ``run_command`` returns or raises, the shell has exited and been reaped; on a timeout or
  an interrupt its whole process group got SIGTERM, then SIGKILL after a grace period. Nothing
  the command started keeps writing to our pipe after we return.
* Memory is bounded however much the command prints: only the head and the tail of the output
  are kept (``HeadTailBuffer``), and the result says how many bytes were cut.
* A non-zero exit is a normal result (the model reads the code); a timeout or an interrupt is a
  ``ToolError`` carrying the partial output.
* The command runs where ``terminal:`` says (``terminal_sandbox.launch``): by default in a
  bubblewrap sandbox (its own PID, mount and network namespaces, only its workspace writable,
  offload's home and the user's secrets invisible), for a subagent and for the parent alike;
  where no sandbox can run, ``auto`` refuses the command instead of running it bare.
* The command never sees the parent's secrets: its environment is an allow-list
  (``sandbox_env``), so ``env`` prints no API key, token, DSN or ``HERMES_HOME``.
* A subagent's command leaves nothing running (``settings["subagent"]``): processes it started
  in the background, still in its process group, are stopped when it returns (in the sandbox
  the PID namespace ends with the shell anyway).
* A subagent's command may not name offload's home (``workspace_paths.home_mentions``) nor run
  in it: a check of the text that gives the model a clear answer; the sandbox is the boundary.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from typing import IO, Any

from offload.toolsets.command_risk import classify
from offload.toolsets.tool_args import optional_number, optional_str, reject_unknown, require_str, setting_int, setting_number
from offload.toolsets.terminal_sandbox import Launch, launch, terminal_config
from offload.toolsets.toolset_names import LINEAGE_ENV, LINEAGE_SETTING
from offload.toolsets.toolspec import Tool, ToolContext, ToolError
from offload.toolsets.workspace_paths import (home_mentions, home_refusal, offload_home, protected_home, resolve_inside,
                                              workspace_root)

MAX_TIMEOUT_S = 600.0
APPROVAL_GATE = "approval_gate"  # offload.subagents.approvals.GATE_SETTING: where a subagent's gate is
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_OUTPUT_CAP_BYTES = 50_000
DEFAULT_KILL_GRACE_S = 2.0
# How often the wait loop looks at ctx.interrupted; an interrupt is honoured within this.
_POLL_S = 0.05
# After the shell exits, how long background jobs may keep our output pipe open before we
# treat them as attached to the command and stop them.
_PIPE_RELEASE_S = 0.5
_READ_CHUNK_BYTES = 65_536
_TOOL = "run_command"


class HeadTailBuffer:
    """Keeps the first and last ``cap_bytes // 2`` bytes of a stream and counts the rest."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self._head_cap = cap_bytes // 2
        self._tail_cap = cap_bytes - self._head_cap
        self._head = bytearray()
        self._tail = bytearray()
        self._total_bytes = 0
        self._lock = threading.Lock()  # the reader thread adds while a timeout renders

    def add(self, data: bytes) -> None:
        with self._lock:
            self._total_bytes += len(data)
            room = self._head_cap - len(self._head)
            if room > 0:
                self._head += data[:room]
                data = data[room:]
            self._tail += data
            # Trim in batches so a chatty command costs amortised O(1) per byte.
            if len(self._tail) > 2 * self._tail_cap + _READ_CHUNK_BYTES:
                del self._tail[: len(self._tail) - self._tail_cap]

    def render(self) -> str:
        with self._lock:
            tail = bytes(self._tail[-self._tail_cap :]) if self._tail_cap else b""
            head = bytes(self._head)
            cut_bytes = self._total_bytes - len(head) - len(tail)
        if cut_bytes <= 0:
            return (head + tail).decode("utf-8", errors="replace")
        marker = (
            f"\n[... {cut_bytes} bytes of output cut here (output cap {self.cap_bytes} bytes); "
            "redirect to a file and search it if you need the middle ...]\n"
        )
        return head.decode("utf-8", errors="replace") + marker + tail.decode("utf-8", errors="replace")


def _pump(stream: IO[bytes], buffer: HeadTailBuffer) -> None:
    try:
        while chunk := stream.read1(_READ_CHUNK_BYTES):  # type: ignore[attr-defined]
            buffer.add(chunk)
    except (OSError, ValueError):
        pass  # pipe closed under us during cleanup; what we have is what there is


def _spawn(command: str, cwd: str, how: Launch) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            [*how.argv, "/bin/sh", "-c", command],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group, so we can signal everything it starts
            close_fds=True,
            env=how.env,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        shell = "bwrap" if how.sandboxed else "/bin/sh"
        raise ToolError(f"{_TOOL}: could not start {shell}: {exc}. The operator must check this machine.") from exc


def _wait_for_exit(proc: subprocess.Popen[bytes], interrupted: threading.Event, deadline: float) -> str:
    """Wait for the shell; returns 'exited', 'timeout' or 'interrupted'.

    On Linux a pidfd wakes us the moment the shell exits (``Popen.wait(timeout)`` polls with a
    back-off that can add as much again as a short command took); the interrupt is looked at
    every ``_POLL_S``."""
    pidfd = _pidfd(proc.pid)
    try:
        while True:
            if proc.poll() is not None:
                return "exited"
            if interrupted.is_set():
                return "interrupted"
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return "timeout"
            if pidfd is not None:
                select.select([pidfd], [], [], min(_POLL_S, remaining_s))
                continue
            try:
                proc.wait(timeout=min(_POLL_S, remaining_s))
                return "exited"
            except subprocess.TimeoutExpired:
                continue
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None  # not Linux 5.3+: Popen.wait's polling


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False once the group has no members left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # the pgid was reused by someone else's group: ours is gone


def _group_has_live_members(pgid: int) -> bool:
    """Whether any non-zombie process is left in the group.

    Orphans are reparented to PID 1, which in a container may never reap them; a zombie keeps
    ``killpg(pgid, 0)`` succeeding, so on Linux we read /proc to ignore zombies.
    """
    if not _signal_group(pgid, 0):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc (not Linux): the signal probe is all we have
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def kill_process_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the command's group, give it ``grace_s`` to exit, then SIGKILL what is left."""
    pgid = proc.pid  # start_new_session made the shell its group's leader
    if _signal_group(pgid, signal.SIGTERM):
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if proc.poll() is None:
                try:
                    proc.wait(timeout=_POLL_S)
                except subprocess.TimeoutExpired:
                    pass
            elif not _group_has_live_members(pgid):
                break  # shell reaped and every other member gone (or a zombie)
            else:
                time.sleep(_POLL_S)  # orphans exit on their own; there is no event to wait on
        _signal_group(pgid, signal.SIGKILL)
    proc.wait()


def _close_stdout(proc: subprocess.Popen[bytes], reader: threading.Thread) -> None:
    # Closing a pipe another thread is blocked reading is unsafe; an escaped daemon still
    # holding it keeps the (daemon) reader alive, and the fd goes with the Popen object.
    if not reader.is_alive() and proc.stdout is not None:
        proc.stdout.close()


def _format_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"exit code: {returncode} (the shell was killed by {name})"
    return f"exit code: {returncode}"


def _resolve_cwd(args: dict[str, Any], ctx: ToolContext) -> str:
    workspace = workspace_root(ctx)
    raw = optional_str(args, "cwd", _TOOL) or "."
    cwd = resolve_inside(workspace, raw, _TOOL, protected_home(ctx))
    if not cwd.is_dir():
        raise ToolError(f"{_TOOL}: cwd '{raw}' is not an existing folder inside the workspace; create it first or drop cwd.")
    return str(cwd)


def _limits(args: dict[str, Any], ctx: ToolContext) -> tuple[float, int, float]:
    default_s = setting_number(ctx.settings, "terminal_timeout_s", DEFAULT_TIMEOUT_S, minimum=1, maximum=MAX_TIMEOUT_S)
    timeout_s = optional_number(args, "timeout_s", _TOOL, minimum=0.001, maximum=MAX_TIMEOUT_S) or default_s
    cap_bytes = setting_int(
        ctx.settings, "terminal_output_cap_bytes", DEFAULT_OUTPUT_CAP_BYTES, minimum=256, maximum=10_000_000
    )
    grace_s = setting_number(ctx.settings, "terminal_kill_grace_s", DEFAULT_KILL_GRACE_S, minimum=0, maximum=30)
    return timeout_s, cap_bytes, grace_s


def _stopped_error(outcome: str, timeout_s: float, output: str) -> ToolError:
    if outcome == "timeout":
        what = (
            f"{_TOOL}: the command did not finish within {timeout_s:g} s and was killed (with everything "
            f"it started). Re-run with a larger timeout_s (at most {MAX_TIMEOUT_S:g}) or split the work "
            "into shorter commands."
        )
    else:
        what = f"{_TOOL}: the agent was interrupted, so the command was killed (with everything it started)."
    return ToolError(f"{what}\nPartial output:\n{output or '(no output)'}")


def _release_pipe(proc: subprocess.Popen[bytes], reader: threading.Thread, grace_s: float) -> str:
    """After the shell exits, wait for its output pipe to close; stop jobs that keep it open."""
    reader.join(_PIPE_RELEASE_S)
    if not reader.is_alive():
        return ""
    kill_process_group(proc, grace_s)
    reader.join(_PIPE_RELEASE_S)
    return (
        "\n[background processes started by the command were still attached to its output and "
        "were stopped; to keep one running, redirect its output: cmd > log 2>&1 &]"
    )


def _stop_leftovers(proc: subprocess.Popen[bytes], grace_s: float) -> str:
    """A subagent's command may leave nothing running: what it started in the background is stopped."""
    if not _group_has_live_members(proc.pid):
        return ""
    kill_process_group(proc, grace_s)
    return ("\n[background processes started by the command were stopped: nothing a subagent starts may "
            "outlive its command; run the work in the foreground instead]")


def _approval(command: str, ctx: ToolContext) -> str:
    """A subagent's command passes its approval gate first (``offload.subagents.approvals``): ''
    or a note for the result, or a ToolError. One without a gate (built outside delegate_task)
    runs no command the classifier flags."""
    if not ctx.settings.get("subagent"):
        return ""
    gate = ctx.settings.get(APPROVAL_GATE)
    if gate is not None:
        return gate.check(_TOOL, command, ctx)
    found = classify(command, ctx.workspace)
    if found.findings:
        raise ToolError(f"{_TOOL}: command refused, not run: {'; '.join(found.reasons())}. This subagent has no "
                        "approval gate (it was not started by delegate_task), so delegation.approvals cannot "
                        "allow it. Do the work another way.")
    return ""


def run_command_handler(args: dict[str, Any], ctx: ToolContext) -> str:
    reject_unknown(args, ("command", "cwd", "timeout_s"), _TOOL)
    command = require_str(args, "command", _TOOL)
    cwd = _resolve_cwd(args, ctx)
    home = protected_home(ctx)
    named = home_mentions(command, home, workspace_root(ctx)) if home is not None else None
    if named is not None:
        raise home_refusal(_TOOL, named, home)  # type: ignore[arg-type]
    approved = _approval(command, ctx)
    timeout_s, cap_bytes, grace_s = _limits(args, ctx)
    ctx.effect_begins()  # approved (or no approval needed): from here the command may have run
    if ctx.interrupted.is_set():
        raise ToolError(f"{_TOOL}: the agent was interrupted before the command started; nothing was run.")
    buffer = HeadTailBuffer(cap_bytes)
    how = launch(terminal_config(ctx.settings), workspace=workspace_root(ctx), cwd=cwd,
                 offload_home=home or offload_home(ctx), tool=_TOOL)
    # An agent's delegation lineage: an `offload run` this command starts stays in its tree
    # (offload.subagents.lineage): root session, depth and budgets go on, never start afresh.
    lineage = ctx.settings.get(LINEAGE_SETTING)
    if isinstance(lineage, str) and lineage:
        how.env[LINEAGE_ENV] = lineage
    return approved + _run(command, cwd, how, ctx, buffer, (timeout_s, grace_s))


def _run(command: str, cwd: str, how: Launch, ctx: ToolContext, buffer: HeadTailBuffer,
         stops: tuple[float, float]) -> str:
    """Start the command, wait for it within ``stops`` (timeout_s, grace_s), and render its result."""
    timeout_s, grace_s = stops
    proc = _spawn(command, cwd, how)
    reader = threading.Thread(target=_pump, args=(proc.stdout, buffer), name=f"run_command-{proc.pid}", daemon=True)
    reader.start()
    try:
        outcome = _wait_for_exit(proc, ctx.interrupted, time.monotonic() + timeout_s)
        if outcome != "exited":
            kill_process_group(proc, grace_s)
            reader.join(_PIPE_RELEASE_S)
            raise _stopped_error(outcome, timeout_s, buffer.render())
        note = _release_pipe(proc, reader, grace_s)
        if ctx.settings.get("subagent"):
            note += _stop_leftovers(proc, grace_s)
    except BaseException:
        if proc.poll() is None:
            kill_process_group(proc, grace_s)
        raise
    finally:
        _close_stdout(proc, reader)
    output = buffer.render()
    return f"{_format_exit(proc.returncode)}\n{output if output else '(no output)'}{note}"


run_command = Tool(
    name="run_command",
    toolset="terminal",
    description=(
        "Run a shell command with /bin/sh -c in the task's workspace and return its exit code and "
        "combined stdout+stderr (long output keeps its head and tail). A non-zero exit code is "
        "reported, not treated as a failure. The command is killed when it exceeds timeout_s or when "
        "the agent is interrupted. Stdin is closed, so interactive programs will not wait for input. "
        "By default the command runs in a sandbox: only the workspace is writable, /tmp is private and "
        "emptied afterwards, the home folder is empty, there is no network, and nothing it starts "
        "outlives it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command line, run by /bin/sh -c."},
            "cwd": {
                "type": "string",
                "description": "Folder to run in, relative to the workspace (default: the workspace).",
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_TIMEOUT_S,
                "description": "Seconds before the command is killed (default from settings, usually 120; max 600).",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    handler=run_command_handler,
    marks_effect=True,
)

TOOLS = [run_command]
