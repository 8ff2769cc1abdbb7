"""A resumed child is seen on the delegation page (issue 44 point 5), in headless Chromium: the
children table says it resumed, from which step, after which owner died and what was answered
for it, and the timeline marks the resume on the child's lane, at the resume time, inside the
lane's bar. The unit comes from a real ``offload run`` killed with SIGKILL while its child's
side-effecting command ran, then continued by ``offload run --resume``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offload.agent.step_log import HOST_DIED
from offload.testing.model_server import last_message_text, text_reply, tool_call_reply
from tests.dashboard.conftest import serve_cli_dashboard, sign_in
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, Cli, cli_env, offload, scripted_parent, until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(150)]
MARKER = "echo ran >> marker.txt && sleep 300"
_CHILD = """var p = document.querySelector('table.children tr.child p.resumed');
return p && {text: p.textContent, step: p.dataset.fromStep, pid: p.dataset.afterPid,
             reissued: p.dataset.modelCallsReissued, unit: document.getElementById('resumed').textContent};"""
_LANE = """var lane = document.querySelectorAll('figure.timeline-wide g.lane')[1];
var mark = lane.querySelector('g.mark-resume'), bar = lane.querySelector('rect.bar');
var box = mark && mark.querySelector('path').getBBox();
return mark && {title: mark.querySelector('title').textContent, x: box.x + box.width / 2,
                x1: bar.x.baseVal.value, x2: bar.x.baseVal.value + bar.width.baseVal.value,
                shown: getComputedStyle(mark.querySelector('path')).stroke};"""


def _child(request):
    if HOST_DIED in last_message_text(request):
        return text_reply("Checked marker.txt: the command ran once. Done.")
    return tool_call_reply("run_command", {"command": MARKER, "timeout_s": 600})


def _json(*args: str, home) -> dict:
    return json.loads(offload(*args, HERMES_HOME=str(home)).stdout)


def killed_and_resumed(tmp_path, model_server, **env: str) -> tuple[Path, str, int]:
    """A home holding one unit resumed after its owner was killed: ``offload run`` SIGKILLed while
    its child's side-effecting command ran, then ``offload run --resume`` (with ``env`` added) to
    the end. The home, the delegation and the killed owner's pid."""
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    home.mkdir()
    workspace.mkdir()
    server = model_server(scripted_parent(child=_child, delegate={"goal": "mark once"},
                                          on_result=text_reply("The resumed child is done.")))
    (home / "config.yaml").write_text(yaml.safe_dump({
        "model": "demo-model", "base_url": server.url, "workspace": str(workspace),
        "toolsets": ["terminal", "file", "delegation"], "delegation": {"resume": "auto"}}))
    run = Cli(("run", "do the marked thing"), home, workspace)
    try:
        did = run.wait_for(HANDLE_RE).group(1)
        until(lambda: (workspace / "marker.txt").exists(), "the child's command started")
        [owner] = [r["owner_pid"] for r in _json("agents", "--json", home=home)["running"] if r["id"] == did]
    finally:
        run.kill()
    again = subprocess.run([sys.executable, "-m", "offload", "run", "--resume", run.wait_for(SESSION_RE).group(1)],
                           cwd=workspace, env=cli_env(HERMES_HOME=str(home), **env), capture_output=True, text=True,
                           timeout=90, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stdout + again.stderr
    return home, did, owner


@pytest.fixture
def resumed_unit(tmp_path, model_server):
    """``killed_and_resumed``'s unit and its dashboard."""
    home, did, owner = killed_and_resumed(tmp_path, model_server)
    for served in serve_cli_dashboard(env=cli_env(HERMES_HOME=str(home))):
        yield served, did, owner


def test_the_delegation_page_shows_the_resume_in_its_table_and_on_the_childs_lane(browser, resumed_unit):
    served, did, owner = resumed_unit
    sign_in(browser, served.login_url)
    browser.get(f"{served.url}/d/{did}")
    child = browser.execute_script(_CHILD)
    assert child is not None, browser.page_source
    assert child["text"].startswith(f"↻ resumed from step 2 after pid {owner} on host ") and child["step"] == "2"
    assert "(0 model calls re-issued; 1 call answered as unknown: run_command)" in child["text"]
    assert child["pid"] == str(owner) and child["reissued"] == "0"
    assert child["unit"].startswith(f"↻ resumed after pid {owner} on host ")
    lane = browser.execute_script(_LANE)
    assert lane is not None, "no resume mark on the child's lane"
    assert lane["title"].startswith(f"↻ resumed from step 2 after pid {owner}") and " at +" in lane["title"]
    assert lane["x1"] < lane["x"] <= lane["x2"] + 1, (lane, browser.page_source)  # within the child's bar: it ran on after the resume
    assert lane["shown"] not in ("", "none")
