"""run_command really runs /bin/sh; these tests check its confinement, limits and cleanup.

The process-lifetime tests run both ways a command can run: in the default sandbox (its own PID
namespace, where ``$$`` and ``$!`` are not host pids) and unsandboxed (``terminal.sandbox: none``);
so they find the command's processes on the host by a marker in their command line."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings as hyp_settings, strategies as st

from offload.toolsets.terminal_tool import TOOLS, HeadTailBuffer, run_command
from offload.toolsets.toolspec import ToolContext, ToolError

pytestmark = pytest.mark.timeout(20)


def _run(ctx: ToolContext, **args: object) -> str:
    return run_command.handler(dict(args), ctx)


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (containers may not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _marked_alive(marker: str) -> list[int]:
    """Host pids of live (non-zombie) processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(os.getpid()):
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and _alive(int(entry)):
                found.append(int(entry))
    return found


def _sleep_marker() -> str:
    """A ``sleep`` argument no other process on the machine has: 30 seconds and a unique fraction."""
    return f"30.{time.monotonic_ns() % 10**9:09d}"


@pytest.fixture(params=["auto", "none"])
def mode_ctx(request: pytest.FixtureRequest, workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, settings={"terminal": {"sandbox": request.param},
                                                      "terminal_kill_grace_s": 0.2})


def test_toolset_exports_one_tool_with_schema() -> None:
    assert [t.name for t in TOOLS] == ["run_command"]
    assert run_command.toolset == "terminal"
    assert run_command.schema()["function"]["parameters"]["required"] == ["command"]


def test_runs_with_sh_in_workspace_and_merges_stderr(ctx: ToolContext, workspace: Path) -> None:
    result = _run(ctx, command='echo "$0"; pwd; echo to-stderr >&2')
    lines = result.splitlines()
    assert lines[0] == "exit code: 0"
    assert lines[1] == "/bin/sh"  # not bash -lc
    assert lines[2] == str(workspace.resolve())
    assert "to-stderr" in lines[3]


def test_nonzero_exit_is_a_normal_result(ctx: ToolContext) -> None:
    result = _run(ctx, command="echo nope; exit 3")
    assert result.startswith("exit code: 3\n")
    assert "nope" in result


def test_empty_output_is_said(ctx: ToolContext) -> None:
    assert _run(ctx, command="true") == "exit code: 0\n(no output)"


def test_stdin_is_closed_so_cat_does_not_wait(ctx: ToolContext) -> None:
    assert _run(ctx, command="cat", timeout_s=5).startswith("exit code: 0")


def test_cwd_inside_workspace(ctx: ToolContext, workspace: Path) -> None:
    (workspace / "sub" / "deeper").mkdir(parents=True)
    result = _run(ctx, command="pwd", cwd="sub/deeper")
    assert result.splitlines()[1] == str((workspace / "sub" / "deeper").resolve())


@pytest.mark.parametrize("cwd", ["..", "../outside", "/", "sub/../../outside"])
def test_cwd_escape_is_refused(ctx: ToolContext, workspace: Path, outside: Path, cwd: str) -> None:
    (workspace / "sub").mkdir()
    marker = outside / "ran"
    with pytest.raises(ToolError, match="outside the workspace"):
        _run(ctx, command=f"touch {marker}", cwd=cwd)
    assert not marker.exists()


def test_cwd_symlink_escape_is_refused(ctx: ToolContext, workspace: Path, outside: Path) -> None:
    (workspace / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ToolError, match=r"resolves to .*outside"):
        _run(ctx, command="pwd", cwd="link")


def test_missing_cwd_is_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="not an existing folder"):
        _run(ctx, command="pwd", cwd="nope")


@pytest.mark.parametrize(
    "args, message",
    [
        ({}, "'command' is required"),
        ({"command": "  "}, "must not be empty"),
        ({"command": "true", "timeout_s": 601}, "between"),
        ({"command": "true", "timeout_s": 0}, "between"),
        ({"command": "true", "timeout_s": "10"}, "must be a number"),
        ({"command": "true", "shell": "bash"}, "unknown argument"),
    ],
)
def test_bad_arguments_are_explained(ctx: ToolContext, args: dict, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        run_command.handler(args, ctx)


def test_bad_setting_names_the_key(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"terminal_timeout_s": "soon"})
    with pytest.raises(ToolError, match="terminal_timeout_s"):
        _run(ctx, command="true")


def test_timeout_kills_the_whole_group_and_keeps_partial_output(mode_ctx: ToolContext) -> None:
    started = time.monotonic()
    marker = _sleep_marker()
    with pytest.raises(ToolError) as caught:
        _run(mode_ctx, command=f"echo started; sleep {marker} & wait", timeout_s=0.5)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "did not finish within 0.5 s" in message
    assert "started" in message.split("Partial output:", 1)[1]
    assert not _marked_alive(marker)


def test_default_timeout_comes_from_settings(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"terminal_timeout_s": 1})
    with pytest.raises(ToolError, match="within 1 s"):
        _run(ctx, command="sleep 30")


def test_sigterm_ignoring_command_gets_sigkill(mode_ctx: ToolContext) -> None:
    marker = f"marker-{time.monotonic_ns()}"
    with pytest.raises(ToolError, match="did not finish"):
        _run(mode_ctx, command=f": {marker}; trap '' TERM; while :; do sleep 0.05; done", timeout_s=0.5)
    assert not _marked_alive(marker)


def test_interrupt_kills_sleep_promptly(mode_ctx: ToolContext, workspace: Path) -> None:
    ctx, marker = mode_ctx, _sleep_marker()
    fifo = workspace / "ready.fifo"
    os.mkfifo(fifo)
    outcome: dict[str, object] = {}

    def call() -> None:
        try:
            outcome["result"] = _run(ctx, command=f"echo ready > ready.fifo; exec sleep {marker}")
        except ToolError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=call)
    worker.start()
    with open(fifo) as ready:  # blocks until the command has started and written
        assert ready.read().strip() == "ready"
    interrupted_at = time.monotonic()
    ctx.interrupted.set()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert time.monotonic() - interrupted_at < 2
    assert "interrupted" in str(outcome["error"])
    assert not _marked_alive(marker)


def test_already_interrupted_runs_nothing(ctx: ToolContext, workspace: Path) -> None:
    ctx.interrupted.set()
    with pytest.raises(ToolError, match="nothing was run"):
        _run(ctx, command="touch ran")
    assert not (workspace / "ran").exists()


def test_output_cap_keeps_head_and_tail(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"terminal_output_cap_bytes": 1000})
    result = _run(ctx, command="echo FIRST; yes filler | head -n 20000; echo LAST")
    assert "FIRST" in result and result.rstrip().endswith("LAST")
    assert "bytes of output cut" in result
    cut = int(result.split("[... ", 1)[1].split(" bytes", 1)[0])
    assert cut == len("FIRST\n") + 20000 * len("filler\n") + len("LAST\n") - 1000
    assert len(result) < 1000 + 300


def test_background_job_holding_output_is_stopped(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"terminal": {"sandbox": "none"}})
    started = time.monotonic()
    marker = _sleep_marker()
    result = _run(ctx, command=f"sleep {marker} &")
    assert time.monotonic() - started < 5
    assert result.startswith("exit code: 0")
    assert "were stopped" in result
    assert not _marked_alive(marker)


def test_in_the_sandbox_nothing_outlives_the_command(ctx: ToolContext) -> None:
    """The PID namespace ends with the shell: a background job dies with it, attached or not."""
    attached, detached = _sleep_marker(), _sleep_marker() + "1"
    result = _run(ctx, command=f"sleep {attached} & sleep {detached} >/dev/null 2>&1 &")
    assert result.startswith("exit code: 0")
    assert not _marked_alive(attached) and not _marked_alive(detached)


def test_detached_background_job_survives_unsandboxed(workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace, settings={"terminal": {"sandbox": "none"}})
    result = _run(ctx, command="sleep 30 >/dev/null 2>&1 & echo $!")
    pid = int(result.splitlines()[1])
    try:
        assert "were stopped" not in result
        assert _alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


@hyp_settings(max_examples=200, deadline=None)
@given(cap=st.integers(min_value=1, max_value=64), chunks=st.lists(st.binary(max_size=40), max_size=20))
def test_head_tail_buffer_keeps_exact_prefix_and_suffix(cap: int, chunks: list[bytes]) -> None:
    buffer = HeadTailBuffer(cap)
    for chunk in chunks:
        buffer.add(chunk)
    data = b"".join(chunks)
    rendered = buffer.render()
    if len(data) <= cap:
        assert rendered == data.decode("utf-8", errors="replace")
    else:
        head_bytes, tail_bytes = cap // 2, cap - cap // 2
        head_text, rest = rendered.split("\n[... ", 1)
        cut_text, tail_text = rest.split(" ...]\n", 1)
        assert head_text == data[:head_bytes].decode("utf-8", errors="replace")
        assert tail_text == data[len(data) - tail_bytes :].decode("utf-8", errors="replace")
        assert cut_text.startswith(f"{len(data) - cap} bytes")


def test_head_tail_buffer_stays_exact_across_tail_trimming() -> None:
    buffer = HeadTailBuffer(100)
    data = bytes(i % 251 for i in range(300_000)).replace(b"\n", b"x")
    for start in range(0, len(data), 7_001):
        buffer.add(data[start : start + 7_001])
    rendered = buffer.render()
    assert rendered.endswith(data[-50:].decode("utf-8", errors="replace"))
    assert f"{len(data) - 100} bytes of output cut" in rendered


def test_commands_do_not_see_the_parents_credentials(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("OFFLOAD_HARMLESS", "visible")
    monkeypatch.setenv("OFFLOAD_LEDGER_URL", "postgresql://u:pw-secret@db/x")
    monkeypatch.setenv("MY_BUILD_FLAG", "listed")
    ctx.settings["terminal"] = {"env_passthrough": ["MY_BUILD_FLAG"]}
    result = _run(ctx, command="env")
    assert "sk-parent-secret" not in result and "ghp-secret" not in result and "pw-secret" not in result
    assert "OFFLOAD_HARMLESS" not in result  # an allow-list: a harmless-looking name is not on it either
    assert "MY_BUILD_FLAG=listed" in result and "PATH=" in result
