"""The result document end to end: ``offload run --json`` (one document on stdout, the
transcript on stderr), ``offload inbox --show ID --json`` and the dashboard's JSON API over
HTTP all give the same document of one delegation."""
from __future__ import annotations

import json

import httpx
import pytest

from offload.testing.model_server import text_reply
from tests.e2e.conftest import offload, scripted_parent
from tests.e2e.test_run_and_restart_e2e import TWO_TASKS, answer_by_goal
from tests.e2e.test_unit_states_e2e import _dashboard

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_run_json_prints_one_document_and_every_surface_agrees(cli, model_server, write_config):
    server = model_server(scripted_parent(child=answer_by_goal, delegate=TWO_TASKS,
                                          on_result=text_reply("Both subagents are done.")))
    write_config(server)
    run = offload("run", "--json", "do two things")
    assert run.returncode == 0, run
    doc = json.loads(run.stdout)  # stdout is exactly one JSON document
    assert doc["schema"] == "offload.run/1" and doc["exit_code"] == 0 and doc["session"].startswith("sess_")
    assert "agent> Both subagents are done." in run.stderr  # the transcript went to stderr
    (delegation,) = doc["delegations"]
    did = delegation["id"]
    assert [(a["text"], a["in_reply_to"]) for a in doc["answers"]] == [
        ("Started it in the background.", None), ("Both subagents are done.", did)]
    assert (delegation["schema"], delegation["state"], delegation["delivery_state"]) == (
        "offload.result/1", "completed", "delivered")
    assert [(c["task"], c["goal"], c["state"], c["summary"]) for c in delegation["children"]] == [
        (1, "alpha", "completed", "alpha done"), (2, "beta", "completed", "beta done")]
    assert delegation["text"].startswith(f"[ASYNC DELEGATION BATCH COMPLETE — {did}]")

    shown = offload("inbox", "--show", did[len("deleg_"):][:6], "--json")
    assert shown.returncode == 0, shown
    assert json.loads(shown.stdout) == delegation

    url, signed = _dashboard(cli)
    with httpx.Client(base_url=url, headers=signed, timeout=10) as http:
        assert http.get(f"/api/delegations/{did}").json() == delegation
        listed = http.get("/api/delegations", params={"state": "completed", "session": doc["session"]}).json()
        assert listed == {"delegations": [delegation], "next": None}
        assert http.get("/api/delegations", params={"state": "partial"}).json() == {"delegations": [], "next": None}
        missing = http.get("/api/delegations/deleg_nope")
        assert missing.status_code == 404 and "no delegation 'deleg_nope'" in missing.json()["error"]
        bad = http.get("/api/delegations", params={"age": "soon"})
        assert bad.status_code == 400 and "is not a duration" in bad.json()["error"]
