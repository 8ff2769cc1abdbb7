"""AIAgent: the tool loop driven by a scripted fake LLM, and once end to end through the real
LLMClient over httpx.MockTransport. Threaded tests synchronize on events, never on sleeps."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from offload.agent.core import AIAgent
from offload.agent.llm import AssistantTurn, LLMClient, ModelNotFoundError
from offload.agent.tool_calls import INTERRUPTED_BEFORE_START
from offload.agent.toolsets import KNOWN_TOOLSETS, register_toolset, resolve_tools, unregister_toolset, validate_toolsets
from llm_fakes import BASE_URL, ScriptedServer, chunk, error_response, hanging_response, sse_response, tool_delta
from offload.toolsets.toolspec import Tool, ToolContext, ToolError

RESULT_KEYS = {
    "final_response", "completed", "exit_reason", "api_calls", "messages", "error", "model", "interrupted", "usage",
    "error_kind", "truncated", "finish_reason", "tool_trace",
}


# --- fakes --------------------------------------------------------------------------------


class ScriptedLLM:
    """Plays back turns; a callable entry is called as (messages, on_activity, should_stop)."""

    def __init__(self, *turns: AssistantTurn | Callable[..., AssistantTurn]) -> None:
        self._turns = list(turns)
        self.requests: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = []

    def stream_turn(self, messages, tools, *, on_activity=None, should_stop=None, on_text=None) -> AssistantTurn:
        self.requests.append((json.loads(json.dumps(messages)), tools))
        if not self._turns:
            raise AssertionError("the agent made more model calls than scripted")
        turn = self._turns.pop(0)
        if callable(turn):
            return turn(messages, on_activity, should_stop)
        on_activity()
        return turn


def call(call_id: str, name: str, args: Any) -> dict[str, str]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"id": call_id, "name": name, "arguments_json": arguments}


def tool_turn(*calls: dict[str, str], content: str = "") -> AssistantTurn:
    return AssistantTurn(content, list(calls), "tool_calls")


def answer(text: str) -> AssistantTurn:
    return AssistantTurn(text, [], "stop", {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12})


def _echo(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"echo:{args.get('text', '')}"


def _fail(args: dict[str, Any], ctx: ToolContext) -> str:
    raise ToolError("no such file 'a.txt'; list the directory first")


def _buggy(args: dict[str, Any], ctx: ToolContext) -> str:
    return str(1 / 0)


def _tool(name: str, handler, toolset: str = "fake") -> Tool:
    return Tool(name=name, toolset=toolset, description=f"{name} tool",
                parameters={"type": "object", "properties": {}}, handler=handler)


@pytest.fixture
def fake_toolsets():
    """Registers "fake" (echo, fail, buggy) and "fake2" (ping); extra tools go in ``extra``."""
    extra: list[Tool] = []
    register_toolset("fake", lambda: [_tool("echo", _echo), _tool("fail", _fail), _tool("buggy", _buggy), *extra])
    register_toolset("fake2", lambda: [_tool("ping", lambda a, c: "pong", "fake2")])
    yield extra
    unregister_toolset("fake")
    unregister_toolset("fake2")


def make_agent(llm, tmp_path: Path, **kwargs) -> AIAgent:
    defaults: dict[str, Any] = dict(model="m-1", base_url=BASE_URL, api_key="sk-parent", toolsets=["fake"],
                                    workspace=tmp_path, llm=llm)
    defaults.update(kwargs)
    return AIAgent(**defaults)


def tool_messages(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in result["messages"] if m["role"] == "tool"]


# --- the loop -----------------------------------------------------------------------------


def test_plain_answer(fake_toolsets, tmp_path):
    llm = ScriptedLLM(answer("Paris."))
    result = make_agent(llm, tmp_path, system_prompt="be brief").run_conversation("Capital of France?")

    assert set(result) == RESULT_KEYS
    assert result["final_response"] == "Paris."
    assert (result["completed"], result["exit_reason"], result["interrupted"]) == (True, "completed", False)
    assert result["api_calls"] == 1 and result["error"] is None and result["model"] == "m-1"
    assert result["usage"] == {"prompt_tokens": 10, "completion_tokens": 2}
    assert result["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
    ]
    sent_tools = llm.requests[0][1]
    assert [t["function"]["name"] for t in sent_tools] == ["echo", "fail", "buggy"]


def test_history_is_kept_and_the_system_prompt_not_duplicated(fake_toolsets, tmp_path):
    history = [{"role": "system", "content": "old"}, {"role": "user", "content": "hi"},
               {"role": "assistant", "content": "hello"}]
    result = make_agent(ScriptedLLM(answer("again")), tmp_path).run_conversation("more", history=history)
    assert [m["content"] for m in result["messages"]] == ["old", "hi", "hello", "more", "again"]


def test_tool_call_then_answer(fake_toolsets, tmp_path):
    llm = ScriptedLLM(tool_turn(call("c1", "echo", {"text": "hi"}), content="Let me check."), answer("It said hi."))
    result = make_agent(llm, tmp_path).run_conversation("go")

    assert result["final_response"] == "It said hi." and result["api_calls"] == 2
    assistant = result["messages"][2]
    assert assistant == {
        "role": "assistant", "content": "Let me check.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"text": "hi"}'}}],
    }
    assert tool_messages(result) == [{"role": "tool", "tool_call_id": "c1", "content": "echo:hi"}]
    assert llm.requests[1][0][-1] == {"role": "tool", "tool_call_id": "c1", "content": "echo:hi"}


def test_parallel_tool_calls_run_in_order(fake_toolsets, tmp_path):
    order: list[str] = []
    fake_toolsets.append(_tool("record", lambda a, c: order.append(a["tag"]) or f"ok {a['tag']}"))
    llm = ScriptedLLM(tool_turn(call("c1", "record", {"tag": "first"}), call("c2", "record", {"tag": "second"})),
                      answer("done"))
    result = make_agent(llm, tmp_path).run_conversation("go")

    assert order == ["first", "second"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages(result)] == [("c1", "ok first"), ("c2", "ok second")]


@pytest.mark.parametrize(("tool_call", "expected"), [
    (call("c1", "fail", {}), "Error: no such file 'a.txt'; list the directory first"),
    (call("c1", "buggy", {}), "Error: ZeroDivisionError: division by zero"),
    (call("c1", "nope", {}), "Error: unknown tool 'nope'. Call one of the available tools instead: buggy, echo, fail."),
])
def test_tool_failures_go_back_to_the_model(fake_toolsets, tmp_path, tool_call, expected):
    llm = ScriptedLLM(tool_turn(tool_call), answer("recovered"))
    result = make_agent(llm, tmp_path).run_conversation("go")

    assert tool_messages(result)[0]["content"] == expected
    assert result["exit_reason"] == "completed" and result["final_response"] == "recovered"


@pytest.mark.parametrize(("arguments", "fragment"), [
    ('{"text": "unterminated', "are not valid JSON"),
    ('["a", "b"]', "must be a JSON object, not list"),
])
def test_bad_arguments_get_an_error_the_model_can_act_on(fake_toolsets, tmp_path, arguments, fragment):
    llm = ScriptedLLM(tool_turn(call("c1", "echo", arguments)), answer("fixed"))
    result = make_agent(llm, tmp_path).run_conversation("go")
    content = tool_messages(result)[0]["content"]
    assert content.startswith("Error: the arguments for 'echo'") and fragment in content
    assert "Call the tool again" in content


def test_max_iterations_returns_the_last_text_seen(fake_toolsets, tmp_path):
    turns = [tool_turn(call(f"c{i}", "echo", {"text": str(i)}), content=f"step {i}") for i in range(3)]
    result = make_agent(ScriptedLLM(*turns), tmp_path, max_iterations=3).run_conversation("go")

    assert (result["exit_reason"], result["completed"], result["api_calls"]) == ("max_iterations", False, 3)
    assert result["final_response"] == "step 2"
    assert len(tool_messages(result)) == 3  # every call answered: the transcript stays valid


def test_max_iterations_without_text_says_what_was_done(fake_toolsets, tmp_path):
    turns = [tool_turn(call(f"c{i}", "echo", {})) for i in range(2)]
    result = make_agent(ScriptedLLM(*turns), tmp_path, max_iterations=2).run_conversation("go")
    assert result["exit_reason"] == "max_iterations"
    assert result["final_response"] == (
        "Stopped at the iteration budget after 2 model call(s) without a final answer; tool calls made: echo ×2."
    )


def test_model_error_ends_the_run_with_its_message(fake_toolsets, tmp_path):
    def reject(messages, on_activity, should_stop):
        raise ModelNotFoundError("HTTP 404: model 'm-1' does not exist at x: gone", model="m-1")

    result = make_agent(ScriptedLLM(reject), tmp_path).run_conversation("go")
    assert (result["exit_reason"], result["completed"], result["interrupted"]) == ("error", False, False)
    assert result["error"] == "HTTP 404: model 'm-1' does not exist at x: gone"
    assert result["error_kind"] == "model"  # the CLI exits 4 on it
    assert result["final_response"] is None and result["api_calls"] == 1


def test_a_toolset_that_fails_to_load_is_an_error_result(tmp_path):
    def broken_loader():
        raise ImportError("tools.missing_tool is not installed")

    register_toolset("broken", broken_loader)
    try:
        result = make_agent(ScriptedLLM(), tmp_path, toolsets=["broken"]).run_conversation("go")
    finally:
        unregister_toolset("broken")
    assert result["exit_reason"] == "error" and "ImportError" in result["error"]
    assert result["error_kind"] == "internal"


# --- interrupts ---------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_interrupt_during_a_slow_tool(fake_toolsets, tmp_path):
    started = threading.Event()

    def slow(args, ctx: ToolContext) -> str:
        started.set()
        if ctx.interrupted.wait(timeout=5):
            raise ToolError("stopped: the command was killed by an interrupt")
        return "finished normally"

    fake_toolsets.append(_tool("slow", slow))
    llm = ScriptedLLM(tool_turn(call("c1", "slow", {}), call("c2", "echo", {"text": "x"}), content="Running it."))
    # A budget of one call: the interrupt, not the budget, must be what the result reports.
    agent = make_agent(llm, tmp_path, max_iterations=1)
    interrupter = threading.Thread(target=lambda: started.wait(5) and agent.interrupt("user pressed stop"))
    interrupter.start()
    result = agent.run_conversation("go")
    interrupter.join()

    assert (result["exit_reason"], result["interrupted"], result["completed"]) == ("interrupted", True, False)
    assert result["api_calls"] == 1 and result["final_response"] == "Running it."
    assert [m["content"] for m in tool_messages(result)] == [
        "Error: stopped: the command was killed by an interrupt", INTERRUPTED_BEFORE_START,
    ]
    assert agent._interrupt_requested is False  # cleared for the next run


@pytest.mark.timeout(10)
def test_interrupt_during_a_stream_keeps_the_partial_text(fake_toolsets, tmp_path):
    streaming = threading.Event()

    def stream(messages, on_activity, should_stop):
        on_activity()
        streaming.set()
        while not should_stop():  # a fake stream polling like the real client does
            threading.Event().wait(0.005)
        return AssistantTurn("partial ans", [], "interrupted")

    agent = make_agent(ScriptedLLM(stream), tmp_path)
    interrupter = threading.Thread(target=lambda: streaming.wait(5) and agent.interrupt())
    interrupter.start()
    result = agent.run_conversation("go")
    interrupter.join()

    assert result["exit_reason"] == "interrupted" and result["interrupted"] is True
    assert result["final_response"] == "partial ans"
    assert result["messages"][-1] == {"role": "assistant", "content": "partial ans"}


def test_interrupt_before_the_run_stops_it_at_once_and_is_then_cleared(fake_toolsets, tmp_path):
    agent = make_agent(ScriptedLLM(answer("second run works")), tmp_path)
    agent.interrupt("cancelled while queued")
    first = agent.run_conversation("go")
    assert (first["exit_reason"], first["api_calls"]) == ("interrupted", 0)
    assert first["final_response"].startswith("Interrupted (cancelled while queued) after 0 model call(s)")
    assert agent.run_conversation("go")["final_response"] == "second run works"


def test_interrupt_reaches_active_children(fake_toolsets, tmp_path):
    parent = make_agent(ScriptedLLM(), tmp_path)
    child = parent.build_child(task_index=0, goal="g", context=None, toolsets=None)
    parent._active_children.append(child)
    parent.interrupt("stop all")
    assert child._interrupt_requested is True and child._interrupt_event.is_set()


# --- activity -----------------------------------------------------------------------------


class TickClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_activity_summary_advances_on_chunks_and_tracks_the_tool(fake_toolsets, tmp_path):
    samples: list[dict[str, Any]] = []
    holder: dict[str, AIAgent] = {}

    def stream(messages, on_activity, should_stop):
        for _ in range(3):
            on_activity()
            samples.append(holder["agent"].get_activity_summary())
        return tool_turn(call("c1", "probe", {}))

    fake_toolsets.append(_tool("probe", lambda a, ctx: json.dumps(ctx.caller.get_activity_summary())))
    agent = make_agent(ScriptedLLM(stream, answer("ok")), tmp_path, clock=TickClock())
    holder["agent"] = agent
    before = agent.get_activity_summary()
    result = agent.run_conversation("go")

    stamps = [before["last_activity_ts"]] + [s["last_activity_ts"] for s in samples]
    assert stamps == sorted(set(stamps))  # strictly increasing: every chunk is a sign of life
    assert [s["api_call_count"] for s in samples] == [1, 1, 1]
    in_tool = json.loads(tool_messages(result)[0]["content"])
    assert in_tool["current_tool"] == "probe" and in_tool["api_call_count"] == 1
    after = agent.get_activity_summary()
    assert after["current_tool"] is None and after["api_call_count"] == 2
    assert after["last_activity_ts"] > in_tool["last_activity_ts"]


# --- children -----------------------------------------------------------------------------


def test_build_child_intersects_toolsets_and_inherits_credentials(fake_toolsets, tmp_path):
    parent = make_agent(ScriptedLLM(), tmp_path, toolsets=["fake", "fake2", "delegation"], max_iterations=7,
                        tool_settings={"max_spawn_depth": 1})
    child = parent.build_child(task_index=2, goal="Count the files", context="only *.py",
                               toolsets=["fake2", "web", "delegation"], subagent_id="sa-x")

    assert child.enabled_toolsets == ["fake2"]  # web: parent lacks it; delegation: depth limit
    assert (child.model, child.base_url, child.api_key) == ("m-1", BASE_URL, "sk-parent")
    assert child.workspace == parent.workspace and child.max_iterations == 7
    assert (child._delegate_depth, child._subagent_id, child._delegate_role) == (1, "sa-x", "leaf")
    assert child.session_id != parent.session_id
    prompt = child.system_prompt
    assert "focused subagent" in prompt and "final summary" in prompt
    assert "Count the files" in prompt
    assert "only *.py" not in prompt  # the context comes once, with the task message


def test_build_child_without_toolsets_gets_the_parents_minus_delegation_at_the_depth_limit(fake_toolsets, tmp_path):
    parent = make_agent(ScriptedLLM(), tmp_path, toolsets=["fake", "delegation"])
    child = parent.build_child(task_index=0, goal="g", context=None, toolsets=None, model="small", api_key="")
    assert child.enabled_toolsets == ["fake"]
    assert (child.model, child.api_key) == ("small", "")


def test_delegation_survives_until_max_spawn_depth(fake_toolsets, tmp_path):
    parent = make_agent(ScriptedLLM(), tmp_path, toolsets=["fake", "delegation"], tool_settings={"max_spawn_depth": 2})
    child = parent.build_child(task_index=0, goal="g", context=None, toolsets=None, role="orchestrator")
    assert child.enabled_toolsets == ["fake", "delegation"] and child._delegate_role == "orchestrator"
    grandchild = child.build_child(task_index=0, goal="g", context=None, toolsets=None, role="orchestrator")
    assert grandchild._delegate_depth == 2
    assert grandchild.enabled_toolsets == ["fake"] and grandchild._delegate_role == "leaf"


def test_child_never_gains_a_toolset_its_parent_lacks(fake_toolsets, tmp_path):
    parent = make_agent(ScriptedLLM(), tmp_path, toolsets=["fake2"], tool_settings={"max_spawn_depth": 5})
    child = parent.build_child(task_index=0, goal="g", context=None, toolsets=["fake", "delegation", "fake2"])
    assert child.enabled_toolsets == ["fake2"]


# --- registry -----------------------------------------------------------------------------


def test_unknown_toolset_names_the_valid_ones(tmp_path):
    with pytest.raises(ValueError) as info:
        make_agent(ScriptedLLM(), tmp_path, toolsets=["terminal", "webb"])
    assert "'webb'" in str(info.value)
    assert all(name in str(info.value) for name in KNOWN_TOOLSETS)


def test_a_single_string_is_not_taken_for_a_list_of_toolsets(tmp_path):
    with pytest.raises(ValueError, match="list of names"):
        make_agent(ScriptedLLM(), tmp_path, toolsets="terminal")


def test_without_an_injected_llm_the_agent_builds_a_client_for_its_endpoint(tmp_path):
    agent = AIAgent(model="llama3", base_url="http://localhost:11434/v1", api_key="", toolsets=[])
    try:
        assert isinstance(agent.llm, LLMClient)
        assert (agent.llm.model, agent.llm.base_url) == ("llama3", "http://localhost:11434/v1")
        assert agent.workspace == Path.cwd() and agent.session_id.startswith("sess_")
    finally:
        agent.close()


def test_resolve_tools_loads_in_order_and_rejects_duplicate_names(fake_toolsets):
    assert [t.name for t in resolve_tools(["fake2", "fake"])] == ["ping", "echo", "fail", "buggy"]
    assert validate_toolsets(["fake", "fake"]) == ["fake"]
    register_toolset("fake_dup", lambda: [_tool("ping", _echo, "fake_dup")])
    try:
        with pytest.raises(ValueError, match="'ping' is defined by both"):
            resolve_tools(["fake2", "fake_dup"])
    finally:
        unregister_toolset("fake_dup")


# --- through the real LLM client ----------------------------------------------------------


def test_tool_round_trip_through_the_real_client(fake_toolsets, tmp_path):
    server = ScriptedServer(
        sse_response(
            chunk(tool_calls=[tool_delta(0, call_id="call_1", name="echo", args='{"te')]),
            chunk(tool_calls=[tool_delta(0, args='xt": "hey"}')]),
            chunk(finish="tool_calls"),
        ),
        sse_response(chunk("The tool said "), chunk("echo:hey.", finish="stop")),
    )
    llm = LLMClient("m-1", BASE_URL, "sk-parent", http_client=server.http_client(), poll_interval_s=0.01)
    result = make_agent(llm, tmp_path).run_conversation("use echo")

    assert result["exit_reason"] == "completed" and result["final_response"] == "The tool said echo:hey."
    second = server.bodies()[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"] == {"name": "echo", "arguments": '{"text": "hey"}'}
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "echo:hey"}


def test_real_client_error_becomes_an_error_result(fake_toolsets, tmp_path):
    server = ScriptedServer(error_response(404, "model m-1 not found"))
    llm = LLMClient("m-1", BASE_URL, "k", http_client=server.http_client())
    result = make_agent(llm, tmp_path).run_conversation("go")
    assert result["exit_reason"] == "error"
    assert result["error"].startswith(f"HTTP 404: model 'm-1' does not exist at {BASE_URL}")
    assert result["error_kind"] == "model"


@pytest.mark.timeout(10)
def test_interrupt_ends_a_hanging_real_stream(fake_toolsets, tmp_path):
    release, sent = threading.Event(), threading.Event()

    def hanging(request):
        sent.set()
        return hanging_response([chunk("Hel")], release)

    llm = LLMClient("m-1", BASE_URL, "k", http_client=ScriptedServer(hanging).http_client(), poll_interval_s=0.01)
    agent = make_agent(llm, tmp_path)
    interrupter = threading.Thread(target=lambda: sent.wait(5) and agent.interrupt("stop"))
    interrupter.start()
    try:
        result = agent.run_conversation("go")
    finally:
        release.set()
        interrupter.join()
    assert (result["exit_reason"], result["interrupted"], result["api_calls"]) == ("interrupted", True, 1)
