"""offload against a real third-party server nobody here wrote: llama.cpp's ``llama-server``
(issue 28). Each numbered point of the issue has its test against the real server:

1. a reply cut off by ``-n 16`` is never called complete: ``offload run`` exits 5 and says so,
   and a child cut off so is rendered TRUNCATED (the fan-out's parent is the scripted server,
   since SmolLM2-135M cannot call tools; its children stream from llama-server);
2. the router's unknown model (``400 model 'x' not found``) is a rejected model: exit 4, and
   the SUBAGENT MODEL REJECTED notice for children;
3. a long prompt read in small batches reports its progress, which counts as life;
4. a child's prompt carries the parent's context once, counted by the server's own tokenizer;
5. a fan-out whose children all complete exits 0, with the tokens the server reported.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from offload.agent.core import AIAgent
from offload.agent.llm import LLMClient
from offload.subagents.child import run_single_child
from offload.testing.model_server import last_message_text
from tests.e2e.conftest import cli_env, parent_requests_with_results, scripted_parent
from tests.realserver.llama import LlamaServer

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(600)]

SHORT_GOALS = [{"goal": "Answer with one word: what colour is a clear daytime sky?"},
               {"goal": "Answer with one number: how many legs does a cat have?"}]


def offload(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m offload ARGS`` to the end: a CPU model server needs longer than the e2e default."""
    return subprocess.run([sys.executable, "-m", "offload", *args], capture_output=True, text=True,
                          env=cli_env(**env), timeout=400, stdin=subprocess.DEVNULL)


def _write_config(home: Path, workspace: Path, parent_url: str, **delegation: Any) -> None:
    # The parent only delegates; its children then get no tools (delegation stops at depth 1),
    # which suits a 135M model that cannot call them.
    data = {"model": "demo-model", "base_url": parent_url, "workspace": str(workspace), "toolsets": ["delegation"],
            "delegation": delegation}
    (home / "config.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def _fan_out(model_server, home: Path, workspace: Path, tasks: list[dict[str, str]], **delegation: Any):
    parent = model_server(scripted_parent(child=lambda request: pytest.fail("a child reached the parent's server"),
                                          delegate={"tasks": tasks}), model_ids=None)
    _write_config(home, workspace, parent.url, **delegation)
    return parent, offload("run", "fan out")


def _injected(parent) -> str:
    results = parent_requests_with_results(parent)
    assert results, "no result was injected into the parent"
    return last_message_text(results[-1])


# -- 1. truncation ---------------------------------------------------------------------------

def test_offload_run_with_a_reply_cut_off_by_the_server_exits_5_and_says_so(llama_n16: LlamaServer):
    done = offload("run", "Write a paragraph about cats.", OFFLOAD_BASE_URL=llama_n16.url, OFFLOAD_MODEL="smollm2")
    assert done.returncode == 5, done.stdout + done.stderr
    assert done.stdout.strip()  # the (cut-off) answer, alone on stdout
    assert "the answer above is incomplete" in done.stderr and "finish_reason=length" in done.stderr


def test_children_cut_off_by_the_server_come_back_truncated(model_server, _isolated_hermes_home, workspace,
                                                            llama_n16: LlamaServer):
    tasks = [{"goal": "Write a long paragraph about the history of cats."},
             {"goal": "Write a long paragraph about the history of dogs."}]
    parent, done = _fan_out(model_server, _isolated_hermes_home, workspace, tasks,
                            base_url=llama_n16.url, model="smollm2")
    assert done.returncode == 5, done.stdout + done.stderr
    assert "completed, TRUNCATED" in done.stderr and "✓" not in done.stderr.split("landed:")[-1]  # the transcript
    text = _injected(parent)
    assert text.count("TRUNCATED: the model's reply was cut off (length)") == 2
    assert "--- ⚠ TASK 1/2" in text and "--- ⚠ TASK 2/2" in text
    # every other view draws the mark from the same flag (issue 39, point 1)
    [unit] = json.loads(offload("inbox", "--all", "--json").stdout)["settled"]
    assert [(c["state"], c["truncated"]) for c in unit["children"]] == [("completed", True)] * 2
    assert offload("agents").stdout.count("⚠ completed, TRUNCATED") == 2


# -- 2. the router's unknown model -------------------------------------------------------------

def test_the_routers_unknown_model_exits_4(llama_router: LlamaServer):
    done = offload("run", "hello", OFFLOAD_BASE_URL=llama_router.url, OFFLOAD_MODEL="no-such-model")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "model 'no-such-model' does not exist" in done.stderr
    assert "model 'no-such-model' not found" in done.stderr  # llama.cpp's own words, quoted


def test_children_on_the_routers_unknown_model_get_the_rejection_notice(model_server, _isolated_hermes_home,
                                                                        workspace, llama_router: LlamaServer):
    parent, done = _fan_out(model_server, _isolated_hermes_home, workspace, SHORT_GOALS,
                            base_url=llama_router.url, model="no-such-model", provider="llama.cpp")
    assert done.returncode == 4, done.stdout + done.stderr  # every child: the model does not exist
    text = _injected(parent)
    assert 'SUBAGENT MODEL REJECTED: the configured Subagent Model "no-such-model"' in text
    assert text.index("SUBAGENT MODEL REJECTED") < text.index("TASK 1/2")
    # a rejected call has no usage because it was rejected, not because usage went unreported (issue 39)
    assert "2 model run(s) rejected by the server; no usage" in done.stderr, done.stderr
    assert "reported no usage" not in done.stderr


# -- 3. a slow prompt is alive ------------------------------------------------------------------

def test_a_long_prompt_read_in_small_batches_reports_life_before_the_first_token(llama_slow_prompt: LlamaServer):
    rng = random.Random(28)
    words = " ".join(rng.choice(["river", "stone", "cloud", "seven", "paper", "light"]) for _ in range(400))
    signals: list[float] = []
    client = LLMClient("smollm2", llama_slow_prompt.url, None, poll_interval_s=0.02,
                       extra_body={"cache_prompt": False})
    try:
        turn = client.stream_turn([{"role": "user", "content": f"{words} {rng.random()}"}], None,
                                  on_activity=lambda: signals.append(time.monotonic()))
    finally:
        client.close()
    assert turn.content or turn.finish_reason  # it answered (4 tokens at most: -n 4)
    before_text = len(signals) - (turn.usage or {}).get("completion_tokens", 0)
    # ~500 tokens in batches of 32: one progress chunk per batch, each a sign of life, instead
    # of a silence as long as the whole prompt.
    assert before_text >= 8, signals


# -- 4. the parent's context, once --------------------------------------------------------------

def test_a_child_reads_the_parents_context_once(llama_n16: LlamaServer, tmp_path):
    rng = random.Random(4)
    context = " ".join(rng.choice(["harbour", "lantern", "orchard", "meadow", "copper", "violet"])
                       for _ in range(1200))
    context_tokens = llama_n16.tokens(context)
    parent = AIAgent(model="smollm2", base_url=llama_n16.url, api_key=None, toolsets=["delegation"],
                     workspace=tmp_path)
    child = parent.build_child(task_index=0, goal="Summarise the notes.", context=context, toolsets=None)
    try:
        entry = run_single_child(0, "Summarise the notes.", child=child, parent_agent=parent, context=context)
    finally:
        child.close()
    prompt_tokens = entry["tokens"]["input"]
    # Twice would not even fit: the server's 2,048-token slot holds the context once, not twice.
    assert context_tokens < prompt_tokens < context_tokens * 1.3, (context_tokens, entry)


# -- 5. a healthy fan-out --------------------------------------------------------------------------

def test_a_fan_out_of_real_children_lands_complete_with_their_tokens(model_server, _isolated_hermes_home, workspace,
                                                                      llama: LlamaServer):
    parent, done = _fan_out(model_server, _isolated_hermes_home, workspace, SHORT_GOALS,
                            base_url=llama.url, model="smollm2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "landed: Subagent Tasks Completed" in done.stderr  # the transcript; stdout holds the answers
    text = _injected(parent)
    assert "--- ✓ TASK 1/2" in text and "--- ✓ TASK 2/2" in text and "TRUNCATED" not in text
    assert "tokens used by this run" in done.stderr
