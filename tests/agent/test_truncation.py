"""A reply the model did not finish is never a complete answer (issue 28, point 1).

The LLM client marks a turn cut off when the server says ``length`` / ``content_filter`` or the
stream ends without any finish_reason; the agent then ends the run as "truncated" (partial
text kept, cut-off tool calls never run), a child entry carries ``truncated`` and the reason,
and every surface says so: the rendered block, the terminal summary and the exit code.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from offload.agent.core import AIAgent
from offload.agent.llm import LLMClient
from offload.agent.llm_stream import MISSING_FINISH
from offload.cli.result_summary import task_lines
from offload.cli.exit_codes import ExitCode, for_event, for_result, for_turn
from offload.render.notification import async_delegation_display_text, format_event
from offload.subagents.child import run_single_child
from llm_fakes import BASE_URL, ScriptedServer, chunk, sse_response, tool_delta


def client(*responses) -> tuple[LLMClient, ScriptedServer]:
    server = ScriptedServer(*responses)
    return LLMClient("m", BASE_URL, "k", http_client=server.http_client(), poll_interval_s=0.01), server


def agent(llm: LLMClient, tmp_path: Path) -> AIAgent:
    return AIAgent(model="m", base_url=BASE_URL, api_key="k", toolsets=["file"], workspace=tmp_path, llm=llm)


def test_finish_reason_length_is_a_cut_off_turn():
    llm, _ = client(sse_response(chunk("Cats are small"), chunk(" furry", finish="length")))
    turn = llm.stream_turn([{"role": "user", "content": "cats"}], None)
    assert (turn.content, turn.finish_reason, turn.truncated) == ("Cats are small furry", "length", True)


def test_a_stream_without_any_finish_reason_counts_as_cut_off_and_runs_no_tool_call():
    llm, _ = client(sse_response(chunk("Looking"), chunk(tool_calls=[tool_delta(0, call_id="c1", name="read_file",
                                                                                 args='{"path": "a')])))
    turn = llm.stream_turn([{"role": "user", "content": "x"}], None)
    assert turn.finish_reason == MISSING_FINISH and turn.truncated
    assert turn.tool_calls == []  # its arguments stop mid-JSON: never run


def test_a_finished_turn_is_not_truncated():
    llm, _ = client(sse_response(chunk("Done.", finish="stop")))
    assert not llm.stream_turn([{"role": "user", "content": "x"}], None).truncated


def test_the_agent_ends_a_cut_off_reply_as_truncated_with_the_partial_text(tmp_path):
    llm, server = client(sse_response(chunk("Cats are small, furry"), chunk(" and", finish="length")))
    result = agent(llm, tmp_path).run_conversation("Write a paragraph about cats.")
    assert result["exit_reason"] == "truncated" and result["truncated"] is True
    assert result["completed"] is False and result["finish_reason"] == "length"
    assert result["final_response"] == "Cats are small, furry and"
    assert len(server.requests) == 1  # no tool call was run, no second call made
    assert for_turn(result["exit_reason"], result["error_kind"]) == ExitCode.INCOMPLETE


def test_a_cut_off_tool_call_is_dropped_from_the_transcript(tmp_path):
    llm, _ = client(sse_response(chunk(tool_calls=[tool_delta(0, call_id="c1", name="read_file", args='{"pa')]),
                                 chunk(finish="length")))
    result = agent(llm, tmp_path).run_conversation("read it")
    assert result["exit_reason"] == "truncated"
    assert not any(m.get("tool_calls") or m.get("role") == "tool" for m in result["messages"])
    assert "cut off (finish_reason=length" in result["final_response"]


class _Child:
    model = "m"

    def __init__(self, out):
        self.out = out

    def run_conversation(self, prompt):
        return self.out


def _truncated_out(text="Cats are small", finish="length"):
    return {"final_response": text, "completed": False, "exit_reason": "truncated", "truncated": True,
            "finish_reason": finish, "api_calls": 1, "model": "m", "error": None, "error_kind": None,
            "usage": {"prompt_tokens": 10, "completion_tokens": 16}}


def test_a_cut_off_child_is_marked_truncated_with_its_reason():
    entry = run_single_child(0, "cats", child=_Child(_truncated_out()))
    assert entry["status"] == "completed" and entry["summary"] == "Cats are small"
    assert entry["truncated"] is True and entry["exit_reason"] == "truncated"
    assert entry["finish_reason"] == "length"


def _batch_event(*entries):
    return {"type": "async_delegation", "delegation_id": "deleg_t", "status": "completed", "is_batch": True,
            "goals": ["cats", "dogs"], "results": list(entries), "session_key": "", "origin_session_id": ""}


def test_the_rendered_result_says_the_reply_was_cut_off_and_never_shows_a_check_mark():
    cut = run_single_child(0, "cats", child=_Child(_truncated_out()))
    done = {"task_index": 1, "status": "completed", "summary": "Dogs bark.", "exit_reason": "completed",
            "truncated": False, "api_calls": 1}
    text = format_event(_batch_event(cut, done))
    assert "--- ⚠ TASK 1/2: cats" in text and "--- ✓ TASK 2/2: dogs" in text
    assert "TRUNCATED: the model's reply was cut off (length)" in text
    assert "finish_reason=length: it reached the output token limit" in text
    assert async_delegation_display_text(_batch_event(cut, done)).startswith("Subagent Tasks Incomplete: ")  # never "Completed"
    lines = task_lines(_batch_event(cut, done))
    assert lines[0].startswith("⚠ 1/2 cats (completed, TRUNCATED") and lines[1].startswith("✓ 2/2 dogs")


def test_a_single_task_stream_without_finish_reason_renders_incomplete():
    entry = run_single_child(0, "cats", child=_Child(_truncated_out(finish=MISSING_FINISH)))
    evt = {"type": "async_delegation", "delegation_id": "deleg_s", "goal": "cats", "session_key": "",
           "origin_session_id": "", **{k: v for k, v in entry.items() if k != "task_index"}}
    text = format_event(evt)
    assert "the stream ended without a finish_reason" in text
    assert async_delegation_display_text(evt).startswith("Subagent Task Incomplete")


@pytest.mark.parametrize("children, code", [
    ([{"status": "completed", "exit_reason": "completed"}], ExitCode.OK),
    ([{"status": "completed", "exit_reason": "truncated", "truncated": True},
      {"status": "completed", "exit_reason": "completed"}], ExitCode.INCOMPLETE),
    ([{"status": "completed", "exit_reason": "max_iterations", "truncated": True}], ExitCode.INCOMPLETE),
    ([{"status": "failed", "error_kind": "endpoint"}, {"status": "error"}], ExitCode.SUBAGENTS_FAILED),
    ([{"status": "failed", "error_kind": "model"}, {"status": "failed", "error_kind": "model"}], ExitCode.MODEL),
    ([{"status": "failed", "error_kind": "endpoint"}], ExitCode.ENDPOINT),
    ([{"status": "failed"}, {"status": "completed", "exit_reason": "completed"}], ExitCode.OK),
    ([{"status": "interrupted"}], ExitCode.OK),  # Ctrl-C already set 130; a stop is not a failure
    ([{"status": "stalled"}], ExitCode.SUBAGENTS_FAILED),
])
def test_a_delivered_result_picks_the_exit_code_from_its_children(children, code):
    assert for_result(children) == code


def test_a_single_task_event_is_judged_by_its_own_outcome():
    assert for_event({"status": "failed", "error_kind": "model"}) == ExitCode.MODEL
    assert for_event({"status": "completed", "exit_reason": "completed"}) == ExitCode.OK
