"""A background child's step log as the agent loop writes it (``AIAgent.step_log``) and as a new
owner replays it (``step_log.replay``), with a scripted fake LLM: the reply is logged before its
tools run, side-effecting calls get a start mark, read-only ones do not, a refused write stops
the child before its next side effect, and a replay never runs a started call again."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from offload.agent.step_log import HOST_DIED, UNMARKED, StepLog, replay
from offload.agent.toolsets import register_toolset, unregister_toolset
from offload.toolsets.toolspec import Tool, ToolError
from test_core import ScriptedLLM, answer, call, make_agent, tool_turn

pytestmark = pytest.mark.timeout(30)


@dataclass
class Step:  # what the ledger hands back (``step_table.Step``'s fields the replay reads)
    seq: int
    kind: str
    payload: dict[str, Any]


@pytest.fixture
def effects(tmp_path):
    """Toolset "fx": ``poke`` (side-effecting: counts its runs in ``ran``) and ``look`` (read-only)."""
    ran: list[str] = []

    def poke(args, ctx):
        ran.append("poke")
        return "poked"
    register_toolset("fx", lambda: [Tool("poke", "fx", "poke", {"type": "object"}, poke),
                                    Tool("look", "fx", "look", {"type": "object"}, lambda a, c: "seen", read_only=True)])
    yield ran
    unregister_toolset("fx")


def _logged(agent, accept=lambda seq, kind: True) -> list[Step]:
    steps: list[Step] = []

    def write(seq, kind, payload):
        steps.append(Step(seq, kind, payload))
        return accept(seq, kind)
    agent.step_log = StepLog(write)
    return steps


def test_the_reply_is_logged_before_its_tools_and_only_side_effects_get_a_start_mark(effects, tmp_path):
    agent = make_agent(ScriptedLLM(tool_turn(call("c1", "look", {}), call("c2", "poke", {})), answer("done")),
                       tmp_path, toolsets=["fx"])
    steps = _logged(agent)
    agent.tools  # noqa: B018 - resolved now, so the handlers below can see the log as it grows
    result = agent.run_conversation("go")
    assert result["final_response"] == "done" and effects == ["poke"]
    assert [(s.seq, s.kind) for s in steps] == [(0, "reply"), (1, "tool_result"), (2, "tool_start"),
                                                (3, "tool_result")]
    assert [c["id"] for c in steps[0].payload["message"]["tool_calls"]] == ["c1", "c2"]
    assert steps[3].payload == {"call_id": "c2", "name": "poke", "content": "poked"}


def test_a_reply_and_its_first_side_effects_start_mark_are_one_write_and_results_come_before_the_next_call(
        effects, tmp_path):
    llm = ScriptedLLM(tool_turn(call("c1", "poke", {}), call("c2", "look", {}), call("c3", "poke", {})), answer("done"))
    agent = make_agent(llm, tmp_path, toolsets=["fx"])
    writes: list[list[tuple[int, str]]] = []

    def write_many(steps):
        writes.append([(seq, kind) for seq, kind, _ in steps])
        assert len(llm.requests) == 1  # every write of this reply's steps before the next model call
        return True
    agent.step_log = StepLog(write_many=write_many)
    assert agent.run_conversation("go")["final_response"] == "done" and effects == ["poke", "poke"]
    assert writes == [[(0, "reply"), (1, "tool_start")],  # before c1 runs
                      [(2, "tool_result")],  # before c2 (read-only) runs
                      [(3, "tool_result"), (4, "tool_start")],  # before c3 runs
                      [(5, "tool_result")]]  # before the next model call


def test_a_refused_write_stops_the_child_before_its_side_effect(effects, tmp_path):
    agent = make_agent(ScriptedLLM(tool_turn(call("c1", "poke", {}))), tmp_path, toolsets=["fx"])
    _logged(agent, accept=lambda seq, kind: kind != "tool_start")  # another owner took the unit
    result = agent.run_conversation("go")
    assert effects == [] and result["exit_reason"] == "interrupted"


@pytest.fixture
def gated(tmp_path):
    """Toolset "gate": ``ask`` (``marks_effect``: calls ``ctx.effect_begins()`` once "approved",
    then acts; refuses before that when its argument says so, as a denied approval does)."""
    ran: list[str] = []

    def ask(args, ctx):
        if args.get("deny"):
            raise ToolError("denied, not run")
        ctx.effect_begins()
        if ctx.interrupted.is_set():
            raise ToolError("interrupted before it started")
        ran.append("ask")
        return "acted"
    register_toolset("gate", lambda: [Tool("ask", "gate", "ask", {"type": "object"}, ask, marks_effect=True)])
    yield ran
    unregister_toolset("gate")


def test_a_marks_effect_tool_is_marked_where_its_effect_begins_and_not_when_refused_first(gated, tmp_path):
    agent = make_agent(ScriptedLLM(tool_turn(call("c1", "ask", {"deny": True}), call("c2", "ask", {})), answer("ok")),
                       tmp_path, toolsets=["gate"])
    steps = _logged(agent)
    order: list[str] = []
    real_queue = agent.step_log._queue
    agent.step_log._queue = lambda kind, payload: (order.append(f"{kind}:{len(gated)}"), real_queue(kind, payload))
    assert agent.run_conversation("go")["final_response"] == "ok" and gated == ["ask"]
    assert [(s.kind, s.payload.get("call_id")) for s in steps] == [
        ("reply", None), ("tool_result", "c1"), ("tool_start", "c2"), ("tool_result", "c2")]
    assert order[2] == "tool_start:0"  # written before the effect, from inside the tool
    assert replay([], [Step(0, "reply", {"message": _reply(("c1", "ask"))})]).to_run[0]["id"] == "c1"


def test_a_refused_mark_from_inside_a_tool_stops_its_effect(gated, tmp_path):
    agent = make_agent(ScriptedLLM(tool_turn(call("c1", "ask", {}))), tmp_path, toolsets=["gate"])
    _logged(agent, accept=lambda seq, kind: kind != "tool_start")  # another owner took the unit
    result = agent.run_conversation("go")
    assert gated == [] and result["exit_reason"] == "interrupted"


def test_a_ledger_that_fails_does_not_stop_the_child(effects, tmp_path):
    agent = make_agent(ScriptedLLM(tool_turn(call("c1", "poke", {})), answer("done")), tmp_path, toolsets=["fx"])

    def broken(seq, kind, payload):
        raise OSError("disk full")
    agent.step_log = StepLog(broken)
    assert agent.run_conversation("go")["final_response"] == "done"
    # ... but a side effect whose start mark was not written is not run: a resume would run it again
    assert effects == [] and UNMARKED in _tool_message(agent, "c1")


def test_a_marks_effect_tool_whose_mark_cannot_be_written_does_not_act(gated, tmp_path):
    agent = make_agent(ScriptedLLM(tool_turn(call("c1", "ask", {})), answer("done")), tmp_path, toolsets=["gate"])

    def broken(seq, kind, payload):
        if kind == "tool_start":
            raise OSError("disk full")
        return True
    agent.step_log = StepLog(broken)
    assert agent.run_conversation("go")["final_response"] == "done"
    assert gated == [] and UNMARKED in _tool_message(agent, "c1")


def _tool_message(agent, call_id: str) -> str:
    return next(m["content"] for m in agent._messages if m.get("role") == "tool" and m.get("tool_call_id") == call_id)


def _reply(*calls: tuple[str, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}} for i, n in calls]}


def test_a_child_resumed_twice_is_told_again_that_a_call_of_the_first_death_may_have_run():
    """Found by tests/chaos/test_resume_faults.py: the first resume answered the started call in
    memory only; the second replay dropped it, the model saw one tool result fewer and asked
    for that command again, which ran twice."""
    steps = [Step(0, "reply", {"message": _reply(("c1", "poke"))}), Step(1, "tool_start", {"call_id": "c1"}),
             Step(2, "reply", {"message": _reply(("c2", "poke"))}), Step(3, "tool_start", {"call_id": "c2"}),
             Step(4, "tool_result", {"call_id": "c2", "content": "poked"}), Step(5, "reply", {"message": _reply()})]
    out = replay([{"role": "user", "content": "go"}], steps)
    tools = [(m["tool_call_id"], m["content"]) for m in out.messages if m["role"] == "tool"]
    assert tools == [("c1", HOST_DIED), ("c2", "poked")] and out.to_run == [] and out.unknown_calls == []
    assert [m["role"] for m in out.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_replay_answers_a_started_call_and_runs_only_those_never_started():
    opening = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]
    steps = [Step(0, "reply", {"message": _reply(("a", "poke"))}),
             Step(1, "tool_start", {"call_id": "a", "name": "poke"}),
             Step(2, "tool_result", {"call_id": "a", "name": "poke", "content": "poked"}),
             Step(3, "reply", {"message": _reply(("b", "poke"), ("c", "look"), ("d", "poke"))}),
             Step(4, "tool_start", {"call_id": "b", "name": "poke"})]
    out = replay(opening, steps)
    assert out.next_seq == 5 and out.replies == 2 and out.unknown_calls == ["poke"]
    assert [m["role"] for m in out.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert out.messages[-1] == {"role": "tool", "tool_call_id": "b", "content": HOST_DIED}
    assert [c["id"] for c in out.to_run] == ["c", "d"]  # read-only, and a side effect never started


def test_a_resumed_agent_runs_the_calls_left_then_asks_the_model(effects, tmp_path):
    opening = [{"role": "user", "content": "go"}]
    out = replay(opening, [Step(0, "reply", {"message": _reply(("b", "poke"), ("c", "poke"))}),
                           Step(1, "tool_start", {"call_id": "b", "name": "poke"})])
    llm = ScriptedLLM(answer("checked"))
    agent = make_agent(llm, tmp_path, toolsets=["fx"])
    steps = _logged(agent)
    agent.step_log.seq = out.next_seq
    result = agent.resume_conversation(out.messages, out.to_run)
    assert result["final_response"] == "checked" and effects == ["poke"]  # c ran; b (started) never again
    sent = llm.requests[0][0]
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["b", "c"]
    assert [(s.seq, s.kind) for s in steps] == [(2, "tool_start"), (3, "tool_result")]


def test_a_compression_step_starts_the_conversation_over():
    kept = [{"role": "user", "content": "[summary]"}]
    out = replay([{"role": "user", "content": "go"}], [
        Step(0, "reply", {"message": _reply(("a", "poke"))}),
        Step(1, "compression", {"messages": kept})])
    assert out.messages == kept and out.to_run == [] and out.unknown_calls == []
