"""What a child is told, and what the user is told about it (issue 39, points 3 and 5), through
real ``offload`` processes against the scripted model server:

* a child that stalls past ``delegation.stream_idle_timeout_s`` is told to raise that key (the
  parent's ``stream_idle_timeout_s`` does not change a child's limit once the delegation sets one);
* the child's system prompt numbers its task from 1, as the results do (``TASK 1/2``);
* a recovered unit whose children all ended unknown lists every one of them when it lands.
"""
from __future__ import annotations

import re

import pytest

from offload import config as cfg_mod
from offload.testing.demo_script import subagent_goal
from offload.testing.model_server import hang_reply, text_reply
from tests.e2e.conftest import HANDLE_RE, SESSION_RE, offload, parent_requests_with_results, scripted_parent, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

TWO_TASKS = {"tasks": [{"goal": "alpha"}, {"goal": "beta"}]}


def _system_prompt(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "system")


def test_a_child_that_stalls_is_told_the_delegation_key_that_sets_its_limit(model_server, write_config):
    server = model_server(scripted_parent(child=lambda request: hang_reply("thinking"), delegate={"goal": "slow"}))
    write_config(server, stream_idle_timeout_s=1)
    done = offload("run", "go")
    [injected] = parent_requests_with_results(server)
    text = injected["messages"][-1]["content"]
    assert "sent nothing for 1 s" in text, text
    command = re.search(r"offload config set (\S+) ([\d.]+)", text)
    assert command and command.group(1) == "delegation.stream_idle_timeout_s", text
    assert "offload config set stream_idle_timeout_s" not in text
    assert cfg_mod.set_value(command.group(1), command.group(2))[0] == 600  # the hint's command works as printed
    assert done.returncode == 3, done  # every child failed at the endpoint


def test_the_child_prompt_numbers_tasks_from_one_as_the_results_do(model_server, write_config):
    server = model_server(scripted_parent(child=lambda request: text_reply(f"{subagent_goal(request)} done"),
                                          delegate=TWO_TASKS))
    write_config(server)
    done = offload("run", "go")
    assert done.returncode == 0, done
    from offload.testing.demo_script import request_role

    prompts = {subagent_goal(r): _system_prompt(r) for r in server.requests if request_role(r) == "subagent"}
    assert "(task #1)" in prompts["alpha"] and "(task #2)" in prompts["beta"], prompts
    [injected] = parent_requests_with_results(server)
    text = injected["messages"][-1]["content"]
    assert "TASK 1/2" in text and "TASK 2/2" in text


def test_a_recovered_unit_whose_children_are_all_unknown_lists_every_one(cli, model_server, write_config, runtime):
    tasks = {"tasks": [{"goal": "alpha"}, {"goal": "beta"}, {"goal": "gamma"}]}
    server = model_server(scripted_parent(child=lambda request: hang_reply("working"), delegate=tasks))
    write_config(server, resume="never")  # about how an all-unknown unit lands: its children are not resumed
    chat = cli("chat")
    sid = chat.wait_for(SESSION_RE).group(1)
    chat.send("go")
    did = chat.wait_for(HANDLE_RE).group(1)
    until(lambda: server.wait_for_requests(5, timeout_s=0.1), "the parent's two calls and three children reached the model")
    chat.kill()  # the owner dies with every child running: none is recorded

    resumed = cli("run", "--resume", sid)
    resumed.finish()
    out = resumed.output
    assert f"background result {did} landed" in out, out
    landed = out[out.index(f"background result {did} landed"):]
    for number, goal in enumerate(("alpha", "beta", "gamma"), start=1):
        assert re.search(rf"\? {number}/3 {goal} \(unknown", landed), landed
