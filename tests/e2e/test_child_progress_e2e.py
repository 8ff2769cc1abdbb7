"""Progress the parent can see (issue 29 item 4), end to end with the scripted model: while a
child runs, its last finished tool call and the last line it wrote reach the chat's roster
(``/agents``), ``offload agents --json`` and the dashboard's roster (from another process,
through the owner's published activity); its result carries the tool trace in the result
document (``offload inbox --show ID --json``)."""
from __future__ import annotations

import json

import pytest

from offload.testing.demo_script import last_role
from offload.testing.model_server import hang_reply, text_reply, tool_call_reply
from tests.e2e.conftest import delegating_chat, offload, open_dashboard, scripted_parent, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
THINKING = "Comparing the two outputs now"


def child(request):
    """Runs one shell command, then writes a line and keeps working (until stopped)."""
    if last_role(request) == "tool":
        return hang_reply(f"Read the listing.\n{THINKING}")
    return tool_call_reply("run_command", {"command": "echo progress-check"})


def test_a_running_childs_last_tool_and_line_reach_every_roster_and_its_trace_the_result(
        cli, model_server, write_config):
    server = model_server(scripted_parent(child=child, delegate={"goal": "check the outputs"},
                                          on_result=text_reply("Noted.")))
    write_config(server)
    chat, did = delegating_chat(cli)
    assert server.wait_for_requests(4, timeout_s=30)  # parent, tool result, child's tool call, child writing

    def roster_line():
        mark = chat.mark()
        chat.send("/agents")
        line = chat.wait_for(r"#1 .*running", start=mark).string
        return line if THINKING in line else None
    line = until(roster_line, "/agents shows the child's last line")
    assert "last run_command ok" in line

    def published():
        running = json.loads(offload("agents", "--json").stdout)["running"]
        kids = running[0]["children"] if running else []
        return kids[0] if kids and kids[0].get("last_text") else None
    kid = until(published, "offload agents shows what the owner published")  # read by another process
    assert kid["last_text"] == THINKING and kid["last_tool"].startswith("run_command ok")

    board = open_dashboard(cli)
    roster = board.get("/", timeout=10).text
    assert "last run_command ok" in roster and THINKING in roster

    chat.send("/stop")
    chat.wait_for(rf"background result {did} landed")
    chat.send("/quit")
    assert chat.finish() == 0
    document = json.loads(offload("inbox", "--show", did, "--json").stdout)
    [kid] = document["children"]
    assert kid["state"] == "interrupted"
    [step] = kid["tool_trace"]
    assert (step["tool"], step["args"], step["outcome"]) == ("run_command", 'command="echo progress-check"', "ok")
    assert isinstance(step["seconds"], float) and kid["tool_trace_dropped"] == 0
    detail = board.get(f"/d/{did}", timeout=10).text
    assert '<ol class="tool-trace">' in detail and "echo progress-check" in detail
