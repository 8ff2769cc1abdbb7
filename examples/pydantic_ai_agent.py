"""A pydantic-ai agent whose tool delegates through offload, and which receives each result
later as a new turn of its own conversation.

    pip install offload pydantic-ai-slim
    python examples/pydantic_ai_agent.py

It runs offline as it is: the parent agent's model is pydantic-ai's ``FunctionModel`` (a
function that decides each reply: call the tool, acknowledge the handle, answer a result), and
offload's subagents talk to ``offload.testing``'s scripted demo model on 127.0.0.1. With real
models, give the ``Agent`` a model name (``"openai:gpt-4o-mini"``) and ``Offload`` its
``model=``/``base_url=`` (or the home's ``config.yaml``); nothing else changes.

The shape, which is the same for any agent framework:

1. the tool calls ``off.delegate(goal, session=...)`` and returns the handle's id at once;
2. the agent ends its turn; the program does other work or waits;
3. ``off.results(session)`` yields each result as it lands; its ``text`` is run as a new user
   turn with the conversation so far, and the result is acknowledged only after that turn is
   done (``result.ack()``), so a crash before then delivers it again to the next process.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass

from pydantic_ai import Agent, ModelMessage, ModelResponse, RunContext, TextPart, ToolCallPart
from pydantic_ai.messages import ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from offload import Offload
from offload.testing import DEMO_MODEL, ScriptedModelServer, demo_model_script

SESSION = "pydantic-ai-example"
GOALS = ("List the strengths of YAML for configuration files.",
         "List the strengths of TOML for configuration files.")


@dataclass
class Deps:
    off: Offload
    session: str


def scripted_parent(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The parent's "model": delegate both comparisons, then answer each result as it arrives."""
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart):  # the handles came back: end the turn, results come later
        return ModelResponse(parts=[TextPart("Both comparisons are running in the background; "
                                             "I'll summarise each one when it lands.")])
    prompt = last.content if isinstance(last, UserPromptPart) and isinstance(last.content, str) else ""
    if prompt.startswith("[ASYNC DELEGATION"):  # offload's notification, as a new user turn
        topic = "YAML" if "YAML" in prompt else "TOML"
        return ModelResponse(parts=[TextPart(f"The {topic} comparison is in: noted for the config decision.")])
    return ModelResponse(parts=[ToolCallPart("delegate", {"goal": goal}, tool_call_id=f"call_{n}")
                                for n, goal in enumerate(GOALS)])


agent = Agent(FunctionModel(scripted_parent), deps_type=Deps,
              instructions="Delegate research with the delegate tool; results arrive later as new messages.")


@agent.tool
def delegate(ctx: RunContext[Deps], goal: str) -> str:
    """Hand one self-contained task to a background subagent; its result arrives later."""
    handle = ctx.deps.off.delegate(goal, session=ctx.deps.session)
    return f"started {handle.id} in the background; its result arrives as a new message"


def main(off: Offload, session: str = SESSION) -> list[str]:
    """Run the conversation: one user turn, then one turn per landed result. Returns the answers."""
    deps = Deps(off, session)
    turn = agent.run_sync("Which config format should we use, YAML or TOML?", deps=deps)
    history, answers = turn.all_messages(), [turn.output]
    for result in off.results(session, timeout_s=120):
        turn = agent.run_sync(result.text, message_history=history, deps=deps)
        history = turn.all_messages()  # the new turn is part of the conversation now...
        answers.append(turn.output)
        result.ack()  # ...so the result is acknowledged: never delivered again
    return answers


if __name__ == "__main__":
    with ScriptedModelServer(demo_model_script) as model, tempfile.TemporaryDirectory() as home:
        with Offload(home=home, model=DEMO_MODEL, base_url=model.url) as off:
            for answer in main(off):
                print(answer)
