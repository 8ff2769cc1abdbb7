"""A resumed child is seen everywhere a user looks (issue 44 point 5): a real ``offload run``
killed with SIGKILL mid-child and resumed by ``offload run --resume``; then the landed result,
``offload agents`` (text and ``--json``), ``offload inbox --all`` and ``inbox --show ID --json``
(the result document) say it resumed, from which step, after which owner (pid, host) died, how
many model calls were issued twice and which calls were answered "the host died while it ran".
(A model call cut by the death, counted as issued twice: ``test_durable_resume_e2e``.)
"""
from __future__ import annotations

import json
import socket

import pytest

from offload.agent.step_log import HOST_DIED
from offload.render.terminal import inert
from offload.testing.model_server import last_message_text, text_reply, tool_call_reply
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, scripted_parent, until
from tests.e2e.test_durable_resume_e2e import _child_requests, _resume, write_config  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]
MARKER = "echo ran >> marker.txt && sleep 300"


def _kill_mid_child(cli, runtime, ready) -> tuple[str, str, int]:
    """``offload run`` until ``ready()``, then SIGKILL: its session, the delegation, the owner's pid."""
    run = cli("run", "do the marked thing")
    did = run.wait_for(HANDLE_RE).group(1)
    until(ready, "the child reached the point where the owner is killed")
    owner_pid = runtime.ledger().get(did).owner_pid
    run.kill()
    return run.wait_for(SESSION_RE).group(1), did, owner_pid


def _json(cli, *args) -> dict:
    shown = cli(*args)
    assert shown.finish() == 0, shown.output
    return json.loads(shown.output[shown.output.index("{"):])


def _resumed_child(document: dict) -> dict:
    (child,) = document["children"]
    assert child["resumed"] is not None, document
    return child["resumed"]


def test_a_resume_after_a_side_effect_is_seen_in_every_view(cli, model_server, write_config, runtime, workspace):
    def child(request):
        if HOST_DIED in last_message_text(request):
            return text_reply("Checked marker.txt: the command ran once. Done.")
        return tool_call_reply("run_command", {"command": MARKER, "timeout_s": 600})

    server = model_server(scripted_parent(child=child, delegate={"goal": "mark once"},
                                          on_result=text_reply("The resumed child is done.")))
    write_config(server)
    sid, did, pid = _kill_mid_child(cli, runtime, lambda: (workspace / "marker.txt").exists())
    again = _resume(cli, sid)
    host = socket.gethostname()
    line = f"↻ resumed from step 2 after pid {pid} on host {inert(host, keep_newlines=False)} died"
    calls = "(0 model calls re-issued; 1 call answered as unknown: run_command)"
    assert line in again.output and calls in again.output, again.output  # the landed result's task lines

    document = _json(cli, "inbox", "--show", did, "--json")  # the result document
    resumed = _resumed_child(document)
    assert resumed["from_step"] == 2 and resumed["resumes"] == 1 and resumed["replies_kept"] == 1
    assert resumed["after"]["pid"] == pid and resumed["after"]["host"] == host
    assert resumed["unknown_calls"] == ["run_command"] and resumed["calls_rerun"] == 0
    assert resumed["model_calls_reissued"] == 0 and len(_child_requests(server)) == 2
    assert resumed["after"]["last_write_at"] <= resumed["at"] <= document["completed_at"]
    unit = document["resumed"]  # the unit's: it says so from its row while it runs, too
    assert {k: unit[k] for k in ("resumes", "after", "at")} == {"resumes": 1, "after": resumed["after"], "at": resumed["at"]}
    assert unit["first_dispatched_at"] <= resumed["after"]["last_write_at"] < document["dispatched_at"]

    listed = _json(cli, "agents", "--json")  # what `agents --json` lists: the same words
    (record,) = [r for r in listed["recent"] if r["id"] == did]
    assert record["children"][0]["resumed"] == resumed and record["resumed"] == document["resumed"]

    for args in (("agents",), ("inbox", "--all")):  # the text views: one line under the child
        shown = cli(*args)
        assert shown.finish() == 0
        said = " ".join(shown.output.split())  # a table line longer than the console wraps
        assert line in said and calls in said, shown.output


def test_a_child_that_never_resumed_says_nothing_of_it(cli, model_server, write_config):
    server = model_server(scripted_parent(child=lambda r: text_reply("Done at once."), delegate={"goal": "answer"},
                                          on_result=text_reply("Noted.")))
    write_config(server)
    run = cli("run", "go")
    did = run.wait_for(HANDLE_RE).group(1)
    assert run.finish() == 0 and "↻" not in run.output
    document = _json(cli, "inbox", "--show", did, "--json")
    assert document["resumed"] is None and document["children"][0]["resumed"] is None
