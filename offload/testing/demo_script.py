"""The demo's scripted "brain" for the loopback model server. It is NOT a model.

Every reply below is written by hand and chosen by simple rules on the request: who is asking
(the parent agent, or a subagent — told apart by the subagent system prompt) and the text of
the last user/tool message. ``request_role`` and ``subagent_goal`` are also used by the
end-to-end tests to script parents and children separately.

Invariant: replies are deterministic; timing comes only from ``chunk_delay_s`` (streamed
children take ~1–2 s) and the crash drill's slow child, whose survey command is still running
when its process is killed; resumed in the next process, it is told the host died while the
command ran (``offload.agent.step_log.HOST_DIED``) and finishes without running it again.
"""
from __future__ import annotations

import re
from typing import Any

from offload.testing.model_server import Reply, last_message_text, text_reply, tool_call_reply

DEMO_MODEL = "demo-model"
DEMO_MODEL_LABEL = "demo-model (scripted, offline — not a real model)"
DEMO_PROMPT = "Compare YAML and TOML for our config files, and check which Python this machine has."
CRASH_PROMPT = "Crash drill: fan out one quick and one slow task."
TERMINAL_COMMAND = "python3 --version && ls"
_SUBAGENT_MARK = "You are a focused subagent"
_STREAM = {"chunk_chars": 6, "chunk_delay_s": 0.04}

DEMO_TASKS = [
    {"goal": "List the strengths of YAML for configuration files.", "group": "compare"},
    {"goal": "List the strengths of TOML for configuration files.", "group": "compare"},
    {"goal": f"Run `{TERMINAL_COMMAND}` in the workspace and report the Python version and the files.",
     "toolsets": ["terminal"]},
]
SLOW_COMMAND = "sleep 30  # survey every file"  # still running when the drill kills its process
CRASH_TASKS = [
    {"goal": "Quick task: count the files in the workspace.", "group": "drill"},
    {"goal": "Slow task: survey every file in depth.", "group": "drill", "toolsets": ["terminal"]},
]


def request_role(request: dict[str, Any]) -> str:
    """``"subagent"`` when the request carries the subagent system prompt, else ``"parent"``."""
    messages = request.get("messages") or []
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    content = first.get("content") if first.get("role") == "system" else ""
    return "subagent" if isinstance(content, str) and _SUBAGENT_MARK in content else "parent"


def subagent_goal(request: dict[str, Any]) -> str:
    """The TASK a subagent request was given (from its system prompt)."""
    content = (request.get("messages") or [{}])[0].get("content") or ""
    match = re.search(r"TASK:\n(.*?)(?:\n\n|$)", content, re.S)
    return match.group(1).strip() if match else ""


def last_role(request: dict[str, Any]) -> str:
    messages = request.get("messages") or []
    return str(messages[-1].get("role")) if messages and isinstance(messages[-1], dict) else ""


def demo_script(request: dict[str, Any]) -> Reply:
    """The whole demo: route by role, then by the last message."""
    if request_role(request) == "subagent":
        return _subagent(request)
    return _parent(request)


def _parent(request: dict[str, Any]) -> Reply:
    text = last_message_text(request)
    if last_role(request) == "tool":
        return text_reply("I've started the subagents in the background and will report each result as it "
                          "lands. Meanwhile, ask me anything else.", **_STREAM)
    if text.startswith("[ASYNC DELEGATION"):
        return text_reply(_follow_up(text))
    if text.startswith("Crash drill"):
        return tool_call_reply("delegate_task", {"tasks": CRASH_TASKS})
    return tool_call_reply("delegate_task", {"tasks": DEMO_TASKS})


_STATUS = re.compile(r"\(status=(\w+)|^Status: (\w+)", re.M)


def _follow_up(notification: str) -> str:
    """An answer that says what the result holds: the crash drill's recovery, tasks that did not
    complete (stopped, failed), the comparisons and the terminal check, whichever are in it."""
    statuses = {a or b for a, b in _STATUS.findall(notification)}
    if "Resumed after the crash" in notification:
        return ("Recovered after the crash: the quick task's real result survived in the ledger, and the slow "
                "task resumed from its last step in the new process; its cut-off command was not run again.")
    if "unknown" in statuses or "owner exited" in notification:
        return ("Recovered after the crash: the quick task's real result survived in the ledger; the slow "
                "task's outcome is unknown because its process died. I can re-dispatch it if you want.")
    if statuses - {"completed", "success"}:
        return (f"Not every task completed ({', '.join(sorted(statuses))}); what they reported is above. "
                "I can re-dispatch the ones that did not finish.")
    parts = []
    if "YAML:" in notification and "TOML:" in notification:
        parts.append("Both comparisons are in. Short version: YAML is friendlier for nested, commented config; "
                     "TOML is stricter and harder to get wrong. For our config files I'd pick YAML.")
    if TERMINAL_COMMAND in notification:
        version = re.search(r"Python \d+\.\d+(?:\.\d+)?", notification)
        found = version.group(0) if version else "the installed Python"
        parts.append(f"The terminal check is done: this machine runs {found}, and the workspace listing came back.")
    return " ".join(parts) or "The subagents reported back; their results are above."


def _subagent(request: dict[str, Any]) -> Reply:
    goal = subagent_goal(request)
    if "YAML" in goal:
        return text_reply("YAML: readable nested structure, comments, anchors for reuse, and it is the "
                          "default for most deployment tooling. Watch out for implicit typing ('no' → false).",
                          **_STREAM)
    if "TOML" in goal:
        return text_reply("TOML: explicit types, no indentation traps, one obvious way to write a table, "
                          "and it is the standard for pyproject.toml. Deep nesting gets verbose.", **_STREAM)
    if TERMINAL_COMMAND in goal:
        if last_role(request) == "tool":
            output = last_message_text(request).strip()
            return text_reply(f"Ran `{TERMINAL_COMMAND}` for real in the workspace. Output:\n{output}", **_STREAM)
        return tool_call_reply("run_command", {"command": TERMINAL_COMMAND})
    if goal.startswith("Quick task"):
        return text_reply("Counted the workspace: 3 files (notes.md, settings.yaml, settings.toml).")
    if goal.startswith("Slow task"):
        if "host running this tool call died" in last_message_text(request):
            return text_reply("Resumed after the crash: the survey command was cut off when its host died, so I "
                              "checked the workspace instead of running it again: 3 files, all surveyed.")
        if last_role(request) == "tool":  # the command ended (no crash came): never asked twice
            return text_reply("Surveyed every file: 3 files, nothing unusual.")
        return tool_call_reply("run_command", {"command": SLOW_COMMAND, "timeout_s": 60})
    return text_reply("(scripted demo subagent: no rule for this task)")
