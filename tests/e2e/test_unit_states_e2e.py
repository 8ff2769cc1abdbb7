"""A stopped unit is never "completed", on any surface: the chat, ``offload agents --json``,
``offload inbox`` (text, ``--json``, ``--show``) and the dashboard over HTTP (roster, history
and its state filter, detail), all driven as a user would, as separate processes.

Two stops: a one-child unit (``interrupted``) and a fan-out whose quick child finished before
the stop (``partial``: one child completed, the other interrupted).
"""
from __future__ import annotations

import json
import re

import httpx
import pytest

from offload.testing.demo_script import subagent_goal
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import delegating_chat, offload, open_dashboard, scripted_parent
from tests.e2e.test_chat_e2e import wait_for_recorded_child

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _stopped_chat(cli, model_server, write_config, goals: list[str], runtime=None):
    """A chat whose unit runs ``goals`` ("quick" answers, anything else hangs), stopped with
    ``offload stop`` from another process once the quick child (if any) is recorded."""
    def child(request):
        return text_reply("quick done") if subagent_goal(request) == "quick" else hang_reply("working…")

    delegate = {"tasks": [{"goal": g} for g in goals]} if len(goals) > 1 else {"goal": goals[0]}
    server = model_server(scripted_parent(child=child, delegate=delegate, on_result=text_reply("Noted the stop.")))
    write_config(server)
    chat, did = delegating_chat(cli)
    if "quick" in goals:
        wait_for_recorded_child(runtime, did)
    assert server.wait_for_requests(2 + len(goals), timeout_s=30)  # the slow child is mid-stream
    stopped = offload("stop", did)
    assert stopped.returncode == 0, stopped
    chat.wait_for(r"agent> Noted the stop\.")
    chat.send("/quit")
    assert chat.finish() == 0
    return chat, did


def _dashboard(cli) -> tuple[str, dict[str, str]]:
    """The URL of ``offload dashboard`` on this home, and the headers a script sends it."""
    board = open_dashboard(cli)
    return board.url, board.headers


def _status_cell(html: str, delegation_id: str) -> str:
    match = re.search(rf'href="/d/{delegation_id}">{delegation_id}</a></td>\s*<td><span class="badge tone-\w+ status'
                      rf' status-(\w+)" data-state="\w+">(\w+)<', html)
    assert match and match.group(1) == match.group(2), html
    return match.group(1)


def _everywhere(cli, did: str, state: str, children: list[str]) -> None:
    """``state`` and the children's states on every surface; ``completed`` nowhere for the unit."""
    agents = json.loads(offload("agents", "--json").stdout)
    (rec,) = [r for r in agents["recent"] if r["id"] == did]
    assert rec["state"] == state and [c["state"] for c in rec["children"]] == children
    inbox = json.loads(offload("inbox", "--all", "--json").stdout)
    assert [r["state"] for r in inbox["settled"] if r["id"] == did] == [state]
    listing = offload("inbox", "--all").stdout
    assert re.search(rf"{did}  {state}( \(stopped by a user\))?  finished", listing), listing
    shown = offload("inbox", "--show", did).stdout
    assert f"Outcome: {state} — " in shown or f"Status: {state}" in shown, shown

    url, signed = _dashboard(cli)
    with httpx.Client(base_url=url, headers=signed, timeout=10) as http:
        assert _status_cell(http.get("/").text, did) == state
        assert _status_cell(http.get("/history").text, did) == state
        assert did in http.get("/history", params={"state": state}).text
        assert did not in http.get("/history", params={"state": "completed"}).text
        assert f'<option selected>{state}</option>' in http.get("/history", params={"state": state}).text
        detail = http.get(f"/d/{did}").text
        assert re.search(rf'id="status" data-state="{state}">{state}<', detail), detail
        bad = http.get("/history", params={"state": "done"})
        assert bad.status_code == 400 and "not a unit state: use one of queued, running" in bad.text


def test_a_stopped_single_child_unit_is_interrupted_everywhere(cli, model_server, write_config):
    chat, did = _stopped_chat(cli, model_server, write_config, ["endless"])
    assert re.search(rf"background result {did} landed: Subagent Task Interrupted: endless", chat.output)
    _everywhere(cli, did, "interrupted", ["interrupted"])


def test_a_stopped_fan_out_with_a_finished_child_is_partial_everywhere(cli, model_server, write_config, runtime):
    chat, did = _stopped_chat(cli, model_server, write_config, ["quick", "slow"], runtime)
    assert re.search(rf"background result {did} landed: Subagent Tasks Partly Completed: quick; slow \(2 tasks\)",
                     chat.output), chat.output
    assert "Finished with Issues" not in chat.output
    assert re.search(r"✓ 1/2 quick \(completed, [\d.]+ s\): quick done", chat.output)
    assert re.search(r"■ 2/2 slow \(interrupted", chat.output)
    _everywhere(cli, did, "partial", ["completed", "interrupted"])
