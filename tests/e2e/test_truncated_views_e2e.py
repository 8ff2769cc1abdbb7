"""A cut-off child looks cut off everywhere, not only in ``offload run`` (issue 39, point 1).

It stays ``completed`` with ``truncated: true`` (no new state); every view draws its mark from
that flag, as ``run`` does: ``offload inbox`` and ``offload agents`` (text and ``--json``)
while its result waits for delivery and after, and ``offload run --sync``, which warns and
exits 5 like a background result with a cut-off child. Real CLI processes against the
scripted model server, whose "cut off" child ends with ``finish_reason: length``.
"""
from __future__ import annotations

import json

import pytest

from offload.testing.demo_script import subagent_goal
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import SESSION_RE, offload, scripted_parent
from tests.e2e.test_run_and_restart_e2e import wait_for_pending_row

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TASKS = {"tasks": [{"goal": "write the whole report"}, {"goal": "count the files"}]}


def cut_off_first(request):
    if subagent_goal(request) == "write the whole report":
        return text_reply("The report begins with", finish_reason="length")
    return text_reply("There are 3 files.")


def _children(listed: list[dict], did: str) -> list[dict]:
    [row] = [r for r in listed if r["id"] == did]
    return row["children"]


def _marks_in(text: str) -> tuple[str, str]:
    """The child lines of the listing: the cut-off one's and the complete one's."""
    lines = text.splitlines()
    cut = next(line for line in lines if "write the whole report" in line and "#1" in line)
    whole = next(line for line in lines if "count the files" in line and "#2" in line)
    return cut, whole


def test_every_listing_marks_the_cut_off_child_pending_and_delivered(cli, model_server, write_config, runtime):
    server = model_server(scripted_parent(child=cut_off_first, delegate=TASKS, after_tool=hang_reply("Started; ")))
    write_config(server)
    chat = cli("chat")
    sid = chat.wait_for(SESSION_RE).group(1)
    chat.send("go")
    row = wait_for_pending_row(runtime, sid)
    chat.kill()  # recorded, never delivered: it waits in the inbox
    did = row.delegation_id

    pending = json.loads(offload("inbox", "--json").stdout)["pending"]
    assert [(c["state"], c["truncated"]) for c in _children(pending, did)] == [("completed", True), ("completed", False)]
    cut, whole = _marks_in(offload("inbox").stdout)
    assert "⚠ completed, TRUNCATED" in cut and "✓ completed" in whole and "TRUNCATED" not in whole
    assert "(1 TRUNCATED)" in offload("inbox").stdout  # the unit's line counts it too

    agents = json.loads(offload("agents", "--json").stdout)["pending"]
    assert [c["truncated"] for c in _children(agents, did)] == [True, False]
    cut, whole = _marks_in(offload("agents").stdout)
    assert "⚠ completed, TRUNCATED" in cut and "✓ completed" in whole

    server.script = scripted_parent(child=cut_off_first, delegate=TASKS)  # the parent answers the result now
    delivered = offload("run", "--resume", sid)
    assert delivered.returncode == 5, delivered  # as `offload run` said of it all along

    settled = json.loads(offload("inbox", "--all", "--json").stdout)["settled"]
    assert [(c["state"], c["truncated"]) for c in _children(settled, did)] == [("completed", True), ("completed", False)]
    cut, whole = _marks_in(offload("inbox", "--all").stdout)
    assert "⚠ completed, TRUNCATED" in cut and "✓ completed" in whole
    recent = json.loads(offload("agents", "--json").stdout)["recent"]
    assert [c["truncated"] for c in _children(recent, did)] == [True, False]
    cut, _ = _marks_in(offload("agents").stdout)
    assert "⚠ completed, TRUNCATED" in cut


def test_run_sync_with_a_cut_off_child_warns_and_exits_5(model_server, write_config):
    server = model_server(scripted_parent(child=cut_off_first, delegate=TASKS,
                                          after_tool=text_reply("Both ran inside the turn.")))
    write_config(server)
    done = offload("run", "--sync", "go")
    assert done.returncode == 5, done  # ExitCode.INCOMPLETE, as for a truncated reply
    assert "1 of 2 subagent(s) that ran inside the turn stopped unfinished (TRUNCATED)" in done.stderr
    assert "⚠ 1/2 write the whole report (completed, TRUNCATED" in done.stderr
    assert "work was cut off (truncated) (exit 5)" in done.stderr
    assert done.stdout.strip() == "Both ran inside the turn."  # the answer alone on stdout, as ever


def test_run_sync_whose_children_all_finish_still_exits_0(model_server, write_config):
    server = model_server(scripted_parent(child=lambda request: text_reply("done"), delegate=TASKS,
                                          after_tool=text_reply("Both ran inside the turn.")))
    write_config(server)
    done = offload("run", "--sync", "go")
    assert done.returncode == 0, done
    assert "TRUNCATED" not in done.stderr
