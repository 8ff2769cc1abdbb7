"""A server that reports no usage makes a child's tokens unknown, never 0 (issue 28, point 5):
the entry says None, the totals count it apart, and the run's summary line says so."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from offload.agent.core import AIAgent
from offload.agent.llm import LLMClient
from offload.cli.views import Ui
from offload.session.driver import SessionDriver
from offload.subagents.child import run_single_child
from offload.subagents.usage import roll_up, sum_usage
from tests.agent.llm_fakes import BASE_URL, ScriptedServer, chunk, sse_response

pytestmark = pytest.mark.timeout(30)


def _child_without_usage(tmp_path: Path) -> AIAgent:
    server = ScriptedServer(sse_response(chunk("The answer is 4.", finish="stop")))  # no usage chunk at all
    llm = LLMClient("m", BASE_URL, "k", http_client=server.http_client(), poll_interval_s=0.01)
    return AIAgent(model="m", base_url=BASE_URL, api_key="k", toolsets=[], workspace=tmp_path, llm=llm)


def test_a_child_whose_server_reports_no_usage_has_unknown_tokens(tmp_path):
    entry = run_single_child(0, "add two and two", child=_child_without_usage(tmp_path))
    assert entry["status"] == "completed"
    assert entry["tokens"] == {"input": None, "output": None, "unknown": "not_reported"}


def test_totals_count_unknown_children_apart_and_the_summary_says_so(tmp_path):
    known = {"tokens": {"input": 100, "output": 10}, "cost_usd": None}
    unknown = run_single_child(0, "add two and two", child=_child_without_usage(tmp_path))
    total = sum_usage([known, unknown])
    assert total == {"input_tokens": 100, "output_tokens": 10, "cost_usd": None, "tokens_unreported": 1}

    parent = AIAgent(model="m", base_url=BASE_URL, api_key="k", toolsets=[], workspace=tmp_path)
    roll_up(parent, total)
    assert parent.usage_totals["tokens_unreported"] == 1
    line = SessionDriver(None, SimpleNamespace(agent=parent), inbox=None, ui=Ui()).usage_line()
    assert line.startswith("tokens used by this run: 100 in / 10 out")
    assert "1 model run(s) whose server reported no usage — not counted (unknown)" in line


def test_a_parent_run_without_usage_is_unknown_too(tmp_path):
    agent = _child_without_usage(tmp_path)
    result = agent.run_conversation("add two and two")
    assert result["usage"] == {"prompt_tokens": None, "completion_tokens": None, "unknown": "not_reported"}
    assert agent.usage_totals == {"input_tokens": 0, "output_tokens": 0, "cost_usd": None, "tokens_unreported": 1}
