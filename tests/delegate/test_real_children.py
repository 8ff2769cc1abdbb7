"""delegate_task with real AIAgent children against the loopback scripted model server."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import tools.delegate_tool as dt
import tools.process_registry_notifications as prn
from offload.agent.core import AIAgent
from offload.testing.model_server import ScriptedModelServer, rule_script, text_reply
from tests.engine.conftest import clean_engine, wait_event  # noqa: F401 - fixture
from tools.process_registry_notifications import format_process_notification

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("clean_engine")]


def parent_on(server: ScriptedModelServer, tmp_path) -> AIAgent:
    return AIAgent(model="demo-model", base_url=server.url, api_key="k", toolsets=["delegation", "file"],
                   workspace=tmp_path, session_id="parent-1")


def test_background_children_answer_through_the_real_runtime(tmp_path):
    script = rule_script([(lambda text: "alpha" in text, text_reply("alpha result", chunk_chars=3)),
                          (lambda text: "beta" in text, text_reply("beta result"))])
    with ScriptedModelServer(script) as server:
        handle = json.loads(dt.delegate_task(tasks=[{"goal": "do alpha"}, {"goal": "do beta"}], background=True,
                                             parent_agent=parent_on(server, tmp_path)))
        evt = wait_event(handle["delegation_id"], timeout_s=30)
    assert evt["status"] == "completed"
    assert [(r["status"], r["summary"]) for r in evt["results"]] == [("completed", "alpha result"),
                                                                   ("completed", "beta result")]
    assert all(r["api_calls"] == 1 for r in evt["results"])


def test_children_lose_the_delegation_toolset_at_max_depth(tmp_path):
    with ScriptedModelServer(rule_script([])) as server:
        parent = parent_on(server, tmp_path)
        child = dt._build_child_agent(task_index=0, goal="g", context=None, toolsets=None, role="leaf",
                                      creds={"model": "demo-model"}, max_iterations=5, parent_agent=parent)
    assert "delegation" not in child.enabled_toolsets and "file" in child.enabled_toolsets
    assert child._delegate_depth == 1


def test_a_rejected_subagent_model_is_named_once_above_the_tasks(tmp_path, monkeypatch):
    # The real config file chooses the child's model; the notice names what was stamped at
    # dispatch, so a config changed (or unreadable) by render time neither hides nor renames it.
    config = Path(os.environ["HERMES_HOME"]) / "config.yaml"
    config.write_text("delegation:\n  model: no-such-model\n  provider: scripted\n", encoding="utf-8")
    with ScriptedModelServer(rule_script([(lambda t: True, text_reply("unused"))])) as server:
        handle = json.loads(dt.delegate_task(tasks=[{"goal": "task one"}, {"goal": "task two"}], background=True,
                                             parent_agent=parent_on(server, tmp_path)))
        evt = wait_event(handle["delegation_id"], timeout_s=30)
        assert len(server.requests) == 2  # fails fast: one request per child, no retries
    assert {r["status"] for r in evt["results"]} == {"failed"}
    assert evt["subagent_config"] == {"model": "no-such-model", "provider": "scripted", "has_fallback": False}
    config.write_text("delegation:\n  model: another-model\n", encoding="utf-8")
    config_reads = []
    monkeypatch.setattr(prn, "_delegation_config", lambda: config_reads.append(1) or {})
    text = format_process_notification(evt)
    assert config_reads == []
    assert 'Subagent Model "no-such-model" was rejected by provider "scripted"' in text
    assert text.count("SUBAGENT MODEL REJECTED") == 1
    assert text.index("SUBAGENT MODEL REJECTED") < text.index("TASK 1/2")


def test_credentials_for_another_host_never_carry_the_parents_key(tmp_path, monkeypatch):
    with ScriptedModelServer(rule_script([(lambda t: True, text_reply("ok"))])) as server:
        parent = parent_on(server, tmp_path)
        monkeypatch.setattr(dt, "_load_config", lambda: {"base_url": "http://127.0.0.1:1/v1"})
        from offload.subagents.config import DelegationConfig
        creds = dt._resolve_delegation_credentials(DelegationConfig.model_validate(dt._load_config()), parent)
        child = dt._build_child_agent(task_index=0, goal="g", context=None, toolsets=None, role="leaf", creds=creds,
                                      max_iterations=5, parent_agent=parent)
    assert child.base_url == "http://127.0.0.1:1/v1" and child.api_key != "k"


