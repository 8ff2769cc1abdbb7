"""``AIAgent``: the tool-calling loop over streamed Chat Completions.

Owns one conversation run (model call → tool calls → model call ... → answer), the agent's
interrupt flag, its liveness record and how a child agent is derived from it. Invariants:

* ``run_conversation`` always returns the result dict (exit_reason "completed",
  "max_iterations", "truncated", "interrupted", "token_budget" / "cost_budget" (a subagent's ``token_budget``
  used up: no further model call, its notice in ``error``) or "error", with "error_kind" "model",
  "endpoint" or "internal" for an error); it never raises for a model or tool failure.
* a reply the model did not finish (the server's output limit, a filter, a stream that ended
  without a finish_reason) ends the run as "truncated" with ``truncated`` set, never as
  "completed": its text is partial, and its tool calls (arguments maybe cut) are not run.
* every tool call the model made gets exactly one tool message, even when interrupted, so the
  transcript stays valid for the next request.
* a subagent built with ``allowed_tools`` (its role's list) is offered only those of the
  built-in tools, and a call to any tool it lacks is a tool error naming the list.
* a background child with a ``step_log`` (``offload.agent.step_log``) writes each reply with
  tool calls before any of them runs, a start mark before each side-effecting call's effect
  (for a ``marks_effect`` tool, where it says its effect begins: after approval) and every
  call's result after it; ``resume_conversation`` continues such a child from its replayed log.
* ``interrupt`` may be called from any thread; it stops the stream at the next chunk, tells
  the running tool through ``ToolContext.interrupted`` and reaches every active child. The
  flag holds until the current (or, if none is running, the next) run returns.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from offload.agent.activity import ActivityTracker
from offload.agent.child import derive_child_settings
from offload.agent.llm import (CHILD_IDLE_TIMEOUT_KEY, DEFAULT_STREAM_IDLE_TIMEOUT_S, PARENT_IDLE_TIMEOUT_KEY,
                              AssistantTurn, LLMClient, LLMError, ModelNotFoundError)
from offload.agent.prompts import default_system_prompt
from offload.agent.tool_calls import INTERRUPTED_BEFORE_START, execute_tool_call
from offload.agent.toolsets import KNOWN_TOOLSETS, ToolLoader, resolve_tools, validate_toolsets
from offload.engine.observers import span
from offload.agent.run_state import UNKNOWN_TOTAL_KEYS, Run, Stamped, run_result
from offload.agent.step_log import UNMARKED, StepLog
from offload.agent.step_marks import StepMarks
from offload.render.truncation import CUT_OFF_EXIT_REASON
from offload.toolsets.child_tools import allowed_only, blocked_tool_message
from offload.toolsets.toolspec import Tool, ToolContext

logger = logging.getLogger(__name__)


class TurnStreamer(Protocol):
    """What the loop needs from an LLM client (``LLMClient`` or a test fake)."""

    def stream_turn(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        on_activity: Callable[[], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_text: Callable[[str], None] | None = None,  # the answer so far (its tail), as it streams
    ) -> AssistantTurn: ...


class AIAgent(StepMarks):
    """An LLM agent with toolsets, run one conversation turn at a time."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        toolsets: list[str] | None,
        max_iterations: int = 50,
        system_prompt: str | None = None,
        workspace: Path | None = None,
        session_id: str | None = None,
        delegate_depth: int = 0,
        llm: TurnStreamer | None = None,
        tool_settings: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S,
        provided_toolsets: Mapping[str, ToolLoader] | None = None,
        allowed_tools: list[str] | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.enabled_toolsets: list[str] = validate_toolsets(KNOWN_TOOLSETS if toolsets is None else toolsets)
        self.max_iterations = max(1, int(max_iterations))
        self.workspace = Path(workspace) if workspace is not None else Path.cwd()
        self.system_prompt = system_prompt if system_prompt is not None else default_system_prompt(self.workspace)
        self.session_id = session_id or f"sess_{uuid.uuid4().hex[:12]}"
        self.tool_settings: dict[str, Any] = dict(tool_settings or {})
        self.stream_idle_timeout_s = float(stream_idle_timeout_s)
        # Toolsets the runtime hands in (its bound ``delegation``); children inherit them.
        self.provided_toolsets: dict[str, ToolLoader] = dict(provided_toolsets or {})
        # A subagent's built-in tools: its role's declared list (None: every tool of its toolsets).
        self.allowed_tools: list[str] | None = None if allowed_tools is None else list(allowed_tools)
        self._delegate_depth = int(delegate_depth)
        self._subagent_id: str | None = None
        self._delegate_role: str | None = None
        self._active_children: list[Any] = []
        self._active_children_lock = threading.Lock()
        self._interrupt_requested = False
        self._interrupt_message: str | None = None
        self._interrupt_event = threading.Event()
        self._activity = ActivityTracker(clock)
        self._messages: Stamped = Stamped()  # the current (or last) run's, for transcript()
        self._llm = llm
        self._owns_llm = llm is None
        self._tools: list[Tool] | None = None
        # A subagent's token budget (``offload.subagents.budget.DelegationBudget``: charge, exhausted).
        self.token_budget: Any = None
        self.step_log: StepLog | None = None  # a background child's durable steps (None: not logged)
        self.resume_from: Any = None  # a resumed child's ``step_log.Replayed`` (set by the subagents layer)
        # Session totals: this agent's runs plus what its subagents add (see add_usage).
        self.usage_totals: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cost_usd": None}
        self._usage_lock = threading.Lock()

    # --- collaborators, built on first use ------------------------------------------------

    @property
    def llm(self) -> TurnStreamer:
        if self._llm is None:
            key = CHILD_IDLE_TIMEOUT_KEY if self._delegate_depth else PARENT_IDLE_TIMEOUT_KEY  # what sets its limit
            self._llm = LLMClient(self.model, self.base_url, self.api_key,
                                  stream_idle_timeout_s=self.stream_idle_timeout_s, idle_timeout_key=key)
        return self._llm

    def close(self) -> None:
        """Release the LLM client's connections if this agent created the client."""
        if self._owns_llm and self._llm is not None:
            close = getattr(self._llm, "close", None)
            if close is not None:
                close()

    @property
    def tools(self) -> list[Tool]:
        # Lazy: tool modules import only when a run needs them (see offload.agent.toolsets).
        if self._tools is None:
            tools = resolve_tools(self.enabled_toolsets, self.provided_toolsets)
            self._tools = tools if self.allowed_tools is None else allowed_only(tools, self.allowed_tools)
        return self._tools

    # --- control from other threads -------------------------------------------------------

    def interrupt(self, message: str | None = None) -> None:
        """Stop the current run soon, and every active child with it. Thread-safe."""
        self._interrupt_message = message
        self._interrupt_requested = True
        self._interrupt_event.set()
        lock = self._active_children_lock
        if lock is None:
            children = list(self._active_children)
        else:
            with lock:
                children = list(self._active_children)
        for child in children:
            try:
                child.interrupt(message)
            except Exception:  # one broken child must not shield its siblings
                logger.exception("interrupting a child agent failed")

    def add_usage(self, usage: Mapping[str, Any]) -> None:
        """Add tokens and cost to the session totals: a run of this agent, or subagents' usage
        rolled up by ``delegate_task`` (inline children at once, background ones on delivery).
        A cost stays None (unknown) until some run reports one. Thread-safe."""
        with self._usage_lock:
            for key in ("input_tokens", "output_tokens"):
                self.usage_totals[key] += int(usage.get(key) or 0)
            for key in UNKNOWN_TOTAL_KEYS.values():  # runs without usage: not counted, and said so
                if usage.get(key):
                    self.usage_totals[key] = self.usage_totals.get(key, 0) + int(usage[key])
            cost = usage.get("cost_usd")
            if isinstance(cost, (int, float)) and not isinstance(cost, bool):
                self.usage_totals["cost_usd"] = (self.usage_totals["cost_usd"] or 0.0) + float(cost)

    def get_activity_summary(self) -> dict[str, Any]:
        return self._activity.summary()

    def transcript(self) -> list[tuple[float, dict[str, Any]]]:
        """``(time added, message)`` of the current run so far (the last run's once it returned),
        for the dashboard's transcript. Thread-safe: read from lists the loop only appends to."""
        messages = self._messages
        return list(zip(list(messages.times), list(messages)))

    def note_tool_step(self, **fields: Any) -> None:
        """Facts the running tool adds to its ``tool_trace`` step (its approval, by the gate)."""
        self._activity.note_step(**fields)

    def touch_activity(self) -> None:
        """A sign of life from work this agent waits on (its inline subagents): it is not idle."""
        self._activity.touch()

    # --- the loop ---------------------------------------------------------------------------

    def run_conversation(self, user_message: str, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Run one user turn to an answer, the iteration budget, an interrupt or an error."""
        return self._run(Run(Stamped(self._opening_messages(user_message, history))), [])

    def resume_conversation(self, messages: list[dict[str, Any]], to_run: list[dict[str, str]]) -> dict[str, Any]:
        """Continue a conversation a dead owner's step log left (``step_log.replay``): its last
        reply's calls ``to_run`` first, then the loop, as ``run_conversation``."""
        return self._run(Run(Stamped([dict(m) for m in messages])), to_run)

    def opening_messages(self, user_message: str) -> list[dict[str, Any]]:
        """The messages a run of ``user_message`` starts from (what a step log's replay starts from)."""
        return self._opening_messages(user_message, None)

    def _run(self, run: Run, to_run: list[dict[str, str]]) -> dict[str, Any]:
        self._messages = run.messages
        self._activity.begin_run()
        error: str | None = None
        error_kind: str | None = None  # "model" | "endpoint" | "internal": frontends map it to exit codes
        try:
            if to_run:
                self._run_tool_calls(run, to_run)
            exit_reason = "interrupted" if self._interrupt_requested else self._loop(run)
        except LLMError as exc:
            exit_reason, error, run.failed_status = "error", str(exc), exc.status_code
            error_kind = "model" if isinstance(exc, ModelNotFoundError) else "endpoint"
        except Exception as exc:  # e.g. a toolset that fails to load; reported, not raised
            logger.exception("agent run failed")
            exit_reason, error, error_kind = "error", f"{type(exc).__name__}: {exc}", "internal"
        finally:
            interrupt_message = self._interrupt_message
            self._clear_interrupt()
        result = run_result(run, self.model, exit_reason, error, interrupt_message, self._activity.trace())
        result["error_kind"] = error_kind
        usage = result["usage"]
        unknown = UNKNOWN_TOTAL_KEYS.get(usage.get("unknown") or "")  # a run without usage: counted apart, not as 0
        self.add_usage({"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                        "cost_usd": usage.get("cost_usd"), **({unknown: 1} if unknown else {})})
        return result

    def _opening_messages(self, user_message: str, history: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        messages = [dict(m) for m in (history or [])]
        if self.system_prompt and not (messages and messages[0].get("role") == "system"):
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": user_message})
        return messages

    def _loop(self, run: Run) -> str:
        for _ in range(self.max_iterations):
            if self._interrupt_requested:
                return "interrupted"
            if self.token_budget is not None and (stop := self.token_budget.stop()):
                exit_reason, run.budget_notice = stop
                return exit_reason
            turn = self._call_model(run)
            self._record_turn(run, turn)
            if turn.finish_reason == "interrupted":
                return "interrupted"
            if turn.truncated:
                return CUT_OFF_EXIT_REASON
            if not turn.tool_calls:
                run.answer = turn.content if turn.content.strip() else None
                return "completed"
            if self.step_log is not None:  # durable before any of its tools runs
                self._logged(lambda log: log.reply(run.messages[-1]))
            self._run_tool_calls(run, turn.tool_calls)
            if self._interrupt_requested:
                return "interrupted"
        return "max_iterations"

    def _call_model(self, run: Run) -> AssistantTurn:
        run.api_calls += 1
        self._activity.api_call_started()
        try:
            with span("offload.model_call", model=self.model, base_url=self.base_url,
                      conversation_id=self.session_id) as traced:
                turn = self.llm.stream_turn(
                    run.messages,
                    [tool.schema() for tool in self.tools],
                    on_activity=self._activity.touch,
                    should_stop=self._should_stop,
                    on_text=self._activity.text,
                )
                traced.set(**(turn.usage or {}), finish_reason=turn.finish_reason, tool_calls=len(turn.tool_calls),
                           response_model=turn.response_model, response_id=turn.response_id)
            return turn
        finally:
            self._activity.touch()  # API call finished (or failed): still a sign of life

    def _should_stop(self) -> bool:
        return self._interrupt_requested

    def _record_turn(self, run: Run, turn: AssistantTurn) -> None:
        run.replies += 1
        run.finish_reason = turn.finish_reason
        run.usage_reported = run.usage_reported or turn.usage is not None
        for key, value in (turn.usage or {}).items():
            run.usage[key] += value
        if self.token_budget is not None:
            self.token_budget.charge(turn.usage, interrupted=turn.finish_reason == "interrupted")
        if turn.content.strip():
            run.last_content = turn.content
        # An interrupted turn's tool calls may be cut off and will not run, so they are dropped.
        calls = [] if turn.finish_reason == "interrupted" else turn.tool_calls
        if not calls:
            if turn.content:
                run.messages.append({"role": "assistant", "content": turn.content})
            return
        run.messages.append({
            "role": "assistant",
            "content": turn.content or None,
            "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments_json"]}}
                for c in calls
            ],
        })

    def _run_tool_calls(self, run: Run, calls: list[dict[str, str]]) -> None:
        try:
            self._run_each(run, calls)
        finally:  # every result durable before the next model call
            self._logged(lambda log: log.flush())

    def _run_each(self, run: Run, calls: list[dict[str, str]]) -> None:
        ctx = ToolContext(
            workspace=self.workspace, interrupted=self._interrupt_event, settings=self.tool_settings, caller=self,
        )
        tools_by_name = {tool.name: tool for tool in self.tools}
        for call in calls:
            if self._interrupt_requested:
                output = INTERRUPTED_BEFORE_START
            elif call["name"] not in tools_by_name and self.allowed_tools is not None:
                output = blocked_tool_message(call["name"], self._delegate_role or "leaf", self.allowed_tools)
                with span("offload.tool_call", tool=call["name"]) as traced:  # a failed call, as any other
                    traced.fail(output)
            else:
                run.tool_counts[call["name"]] += 1
                tool = tools_by_name.get(call["name"])
                call_ctx = self._start_mark(call, tool, ctx)
                if self._interrupt_requested:  # the start mark found another owner: never run it
                    output = INTERRUPTED_BEFORE_START
                elif call_ctx is None:
                    output = f"Error: {UNMARKED}"
                else:
                    with span("offload.tool_call", tool=call["name"]) as traced:
                        output = execute_tool_call(call, tools_by_name, call_ctx, self._activity,
                                                   on_error=traced.fail)
            if self.step_log is not None:
                self._logged(lambda log: log.tool_finished(call, output))
            run.messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})

    def _clear_interrupt(self) -> None:
        self._interrupt_requested = False
        self._interrupt_message = None
        self._interrupt_event.clear()

    # --- children ---------------------------------------------------------------------------

    def build_child(
        self,
        *,
        task_index: int,
        goal: str,
        context: str | None,
        toolsets: list[str] | None,
        role: str = "leaf",
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        max_iterations: int | None = None,
        subagent_id: str | None = None,
        stream_idle_timeout_s: float | None = None,
    ) -> AIAgent:
        """A subagent one level deeper, never with a toolset this agent lacks."""
        derived = derive_child_settings(
            parent_toolsets=self.enabled_toolsets, requested=toolsets, role=role,
            child_depth=self._delegate_depth + 1, settings=self.tool_settings,
            goal=goal, context=context, task_index=task_index, workspace=self.workspace,
        )
        child = AIAgent(
            model=model or self.model,
            base_url=base_url or self.base_url,
            api_key=api_key if api_key is not None else self.api_key,
            toolsets=derived.toolsets,
            max_iterations=max_iterations or self.max_iterations,
            system_prompt=derived.system_prompt,
            workspace=self.workspace,
            session_id=f"{self.session_id}-sub{task_index}-{uuid.uuid4().hex[:6]}",
            delegate_depth=self._delegate_depth + 1,
            tool_settings=derived.tool_settings,
            stream_idle_timeout_s=stream_idle_timeout_s or self.stream_idle_timeout_s,
            provided_toolsets=self.provided_toolsets,
            allowed_tools=derived.tools,
        )
        child._subagent_id = subagent_id or f"sa-{task_index}-{uuid.uuid4().hex[:8]}"
        child._delegate_role = derived.role
        return child
