"""Safe-to-leave-alone subagents as a Telegram user sees them (issue 29, items 1, 3, 4, 5, 6):
``offload gateway`` in a subprocess against the loopback fake Bot API and the scripted model.
A delegation at capacity is queued (said so, shown ``queued`` in the /agents bubble) and
starts when the slot frees; a running child's last tool and last line reach the bubble; a
session over its daily budget gets the refusal in the chat; a child's call to a tool it may
not have comes back to it as a tool error naming its list, and its report reaches the chat; a
child's fetch_url of a loopback service is refused before any request reaches it, unless
``web.allowed_hosts`` lists it. Every wait is on a message the fake received or a ledger row,
never a fixed sleep."""
from __future__ import annotations

import threading

import pytest

from offload.gateway.telegram.fake_api import FakeBotApi, Sent
from offload.ledger.queries import running_rows
from offload.testing.demo_script import last_role, subagent_goal
from offload.testing.model_server import hang_reply, last_message_text, text_reply, tool_call_reply
from tests.e2e.gateway_harness import DM, chat_parent, echo_goal, shown, visible
from tests.e2e.test_gateway_e2e import api, configure, start_gateway, stop, wait_shown  # noqa: F401 - fixtures
from tests.toolsets.test_fetch_guard import Server, server  # noqa: F401 - fixture

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def roster_bubble(api: FakeBotApi) -> Sent:
    assert api.wait_until(lambda: [m for m in api.messages(DM) if m.text.startswith("<b>Background agents")], 60)
    [bubble] = [m for m in api.messages(DM) if m.text.startswith("<b>Background agents")]
    return bubble


def reports_its_tool_result(tool: str, arguments: dict):
    """A child that calls ``tool`` once and answers with what the tool said."""
    def child(request):
        if last_role(request) == "tool":
            return text_reply(f"REPORT: {last_message_text(request)[:600]}")
        return tool_call_reply(tool, arguments)
    return child


def test_a_delegation_at_capacity_is_queued_shown_queued_and_started_when_the_slot_frees(
        api, configure, start_gateway, runtime):
    release = threading.Event()

    def child(request):
        if subagent_goal(request).startswith("slow"):
            assert release.wait(60), "the test never released the slow child"
        return text_reply(f"finished {subagent_goal(request)}")
    configure(chat_parent(lambda text: {"goal": text}, child), max_concurrent_children=1)
    gateway = start_gateway()
    api.user_says(DM, "slow survey of the repository")
    assert api.wait_until(lambda: running_rows(runtime.ledger()), 60)
    api.user_says(DM, "quick check of the tests")
    wait_shown(api, DM, "queued, every background slot is busy; it starts when one frees")
    api.user_says(DM, "/agents")
    bubble = roster_bubble(api)
    assert "queued: quick check of the tests" in visible(bubble) and "running: slow survey" in visible(bubble)
    release.set()
    wait_shown(api, DM, "finished quick check of the tests")  # it started by itself once the slot freed
    assert api.wait_until(lambda: "all 2 background delegation(s) finished (2 completed)" in visible(bubble), 60), \
        bubble.edits
    stop(gateway)


def test_a_running_childs_last_tool_and_last_line_reach_the_roster_bubble(api, configure, start_gateway, runtime):
    def child(request):  # one command, then a reply it is still writing
        if last_role(request) == "tool":
            return hang_reply("Comparing the two outputs now")
        return tool_call_reply("run_command", {"command": "echo step"})
    configure(chat_parent(lambda text: {"goal": "compare the outputs"}, child))
    gateway = start_gateway()
    api.user_says(DM, "alpha")
    assert api.wait_until(lambda: running_rows(runtime.ledger()), 60)
    api.user_says(DM, "/agents")
    bubble = roster_bubble(api)
    assert api.wait_until(lambda: "last run_command ok" in visible(bubble)
                          and "writing: Comparing the two outputs now" in visible(bubble), 60), bubble.edits
    api.user_says(DM, "/stop")
    assert api.wait_until(lambda: "finished" in visible(bubble), 60), bubble.edits
    stop(gateway)


def test_a_session_over_its_daily_budget_gets_the_refusal_in_the_chat(api, configure, start_gateway):
    configure(chat_parent(lambda text: {"goal": f"work on {text}"}, echo_goal), max_tokens_per_day=100)
    gateway = start_gateway()
    api.user_says(DM, "alpha")
    wait_shown(api, DM, "result of work on alpha")  # its tokens are counted as the child runs
    api.user_says(DM, "beta")
    wait_shown(api, DM, "delegate_task refused")
    text = shown(api, DM)
    assert "delegation.max_tokens_per_day=100" in text and "00:00 UTC" in text, text
    assert "result of work on beta" not in text
    stop(gateway)


def test_a_childs_call_to_a_tool_off_its_list_is_a_tool_error_and_its_report_reaches_the_chat(
        api, configure, start_gateway):
    configure(chat_parent(lambda text: {"goal": "read the notes"},
                          reports_its_tool_result("delegate_task", {"goal": "split the reading"})))
    gateway = start_gateway()
    api.user_says(DM, "alpha")
    wait_shown(api, DM, "REPORT:")
    text = shown(api, DM)
    assert "'delegate_task' is not available to a subagent (role leaf)" in text and "delegation.leaf_tools" in text, text
    stop(gateway)


WEB_TOOLSETS = {"toolsets": ["terminal", "file", "web", "delegation"]}


def test_a_childs_fetch_of_a_loopback_service_is_refused_and_the_reason_reaches_the_chat(
        api, configure, start_gateway, server: Server):
    url = f"http://127.0.0.1:{server.port}/page"
    configure(chat_parent(lambda text: {"goal": "read the local page"}, reports_its_tool_result("fetch_url", {"url": url})),
              top=WEB_TOOLSETS)
    gateway = start_gateway()
    api.user_says(DM, "what does the local page say?")
    wait_shown(api, DM, "REPORT:")
    text = shown(api, DM)
    assert "127.0.0.1 is a loopback address" in text and "web.allowed_hosts" in text, text
    assert "hello from loopback" not in text
    assert server.seen == []  # the service never saw a request
    stop(gateway)


def test_a_loopback_service_listed_in_web_allowed_hosts_is_fetched(api, configure, start_gateway, server: Server):
    url = f"http://127.0.0.1:{server.port}/page"
    configure(chat_parent(lambda text: {"goal": "read the local page"}, reports_its_tool_result("fetch_url", {"url": url})),
              top={**WEB_TOOLSETS, "web": {"allowed_hosts": ["127.0.0.1"]}})
    gateway = start_gateway()
    api.user_says(DM, "what does the local page say?")
    wait_shown(api, DM, "REPORT:")
    assert "hello from loopback" in shown(api, DM), shown(api, DM)
    assert server.seen == [("/page", f"127.0.0.1:{server.port}")]
    stop(gateway)
