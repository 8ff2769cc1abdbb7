"""The gateway's /agents roster bubble shows what each running child did last (issue 29 item 4)."""
from __future__ import annotations

from offload.gateway.roster import roster_text


def test_a_running_childs_last_tool_and_line_are_in_the_bubble():
    items = [{"delegation_id": "deleg_1", "status": "running", "goal": "check the outputs",
              "children_activity": [{"api_calls": 2, "current_tool": None, "last_tool": "run_command ok 0.3 s",
                                     "last_text": "Comparing the two outputs now"},
                                    {"api_calls": 1, "current_tool": "read_file"}]}]
    assert roster_text(items).splitlines() == [
        "deleg_1 running: check the outputs",
        "  #1 api calls 2, tool -, last run_command ok 0.3 s, writing: Comparing the two outputs now",
        "  #2 api calls 1, tool read_file"]
