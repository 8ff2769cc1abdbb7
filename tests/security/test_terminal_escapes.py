"""Untrusted text is inert on a terminal (issue 40, point 7): a hostile child's goal, summary
and error -- escape sequences that clear the screen, retitle the window, make a link that lies,
a single-byte CSI, a CR that overwrites the line, a bidirectional override -- reach the user's
terminal only as visible escapes, in ``offload run`` and in ``offload agents`` / ``inbox`` run
later by another process from the ledger's rows; ``--json`` keeps the exact text as data."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from offload.render.terminal import inert, inert_json
from offload.testing.demo_script import request_role, subagent_goal
from offload.testing.model_server import ScriptedModelServer, error_reply, text_reply, tool_call_reply
from tests.e2e.conftest import offload, workspace, write_config  # noqa: F401 - fixtures

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
HOSTILE = ("\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b]8;;http://evil.test/\x1b\\click here\x1b]8;;\x1b\\ "
           "\x9b31mred\x9b0m\rOVERWRITTEN \u202etxt.exe\x08\x7f")
RAW = ("\x1b", "\x07", "\x9b", "\r", "\u202e", "\x08", "\x7f")


def assert_inert(output: str, what: str) -> None:
    raw = [repr(c) for c in RAW if c in output]
    assert not raw, f"{what} printed raw {raw}:\n{output!r}"


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False).strip('"')


def hostile(request: dict[str, Any]):
    if request_role(request) == "parent":
        if request["messages"][-1]["role"] == "tool" or "[ASYNC DELEGATION" in str(request["messages"][-1]):
            return text_reply(f"Parent relays: {HOSTILE}")
        return tool_call_reply("delegate_task", {"tasks": [{"goal": f"summarize {HOSTILE}"}, {"goal": "fail loudly"}]})
    if subagent_goal(request).startswith("fail"):
        return error_reply(400, f"bad request {HOSTILE}")
    return text_reply(f"Summary: {HOSTILE}")


def test_a_hostile_childs_text_reaches_no_terminal_raw(_isolated_hermes_home: Path, write_config) -> None:
    with ScriptedModelServer(hostile) as server:
        write_config(server)
        done = offload("run", "summarize the page")
    assert done.returncode in (0, 5), done  # 5: a task failed (the loud one)
    assert_inert(done.stdout + done.stderr, "offload run")
    assert "\\x1b[2J" in done.stdout + done.stderr and "\\u202e" in done.stdout + done.stderr  # shown, escaped
    for args in (("agents",), ("inbox", "--all"), ("agents", "--json"), ("inbox", "--all", "--json")):
        shown = offload(*args)  # another process, reading the rows `offload run` wrote
        assert shown.returncode == 0, shown
        assert_inert(shown.stdout + shown.stderr, f"offload {' '.join(args)}")
    listed = json.loads(offload("agents", "--json").stdout)
    ids = {row["id"] for key in ("pending", "recent") for row in listed[key]}
    assert ids and any(as_json(HOSTILE) in as_json(row) for row in listed["recent"] + listed["pending"])
    for delegation_id in ids:
        full = offload("inbox", "--show", delegation_id)
        assert_inert(full.stdout + full.stderr, "offload inbox --show")
        document = offload("inbox", "--show", delegation_id, "--json")
        assert_inert(document.stdout, "offload inbox --show --json")
        assert as_json(HOSTILE) in as_json(json.loads(document.stdout))  # the data is kept exactly


def test_inert_escapes_every_control_visibly_and_keeps_the_rest() -> None:
    assert inert("line one\nline two\ttabbed é ✓") == "line one\nline two\ttabbed é ✓"
    assert inert("a\nb", keep_newlines=False) == "a\\nb"
    assert inert(HOSTILE) == ("\\x1b[2J\\x1b[H\\x1b]0;pwned\\a\\x1b]8;;http://evil.test/\\x1b\\click here"
                              "\\x1b]8;;\\x1b\\ \\x9b31mred\\x9b0m\\rOVERWRITTEN \\u202etxt.exe\\b\\x7f")
    assert inert(inert(HOSTILE)) == inert(HOSTILE)  # escaping twice changes nothing more
    document = json.dumps({"summary": HOSTILE}, ensure_ascii=False)
    assert json.loads(inert_json(document)) == {"summary": HOSTILE}
    assert_inert(inert_json(document), "inert_json")


def test_rows_a_hostile_host_wrote_render_inert_in_every_ledger_view() -> None:
    """On a shared ledger any host writes rows: every field a view shows (id, session, goal,
    state, drop reason, claim holder) is escaped, and the state word keeps its colour."""
    from rich.console import Console

    from offload.cli import views
    from offload.ledger import LedgerRow

    row = LedgerRow(delegation_id=f"deleg_{HOSTILE}", origin_session=f"sess_{HOSTILE}", state="failed",
                    dispatched_at=1.0, completed_at=2.0, task={"goal": f"goal {HOSTILE}", "goals": [HOSTILE]},
                    event={"status": "failed", "summary": HOSTILE, "error": HOSTILE},
                    delivery_state="dropped", drop_reason=f"dropped {HOSTILE}", delivery_claim=HOSTILE)
    live = [{"delegation_id": HOSTILE, "status": "running", "goal": HOSTILE, "goals": [HOSTILE], "where": HOSTILE,
             "children_activity": [{"current_tool": HOSTILE, "last_text": HOSTILE, "last_tool": HOSTILE}]}]
    console = Console(record=True, width=400, force_terminal=True)  # colours on: only offload's own ESCs
    for renderable in (views.ledger_finished([row], "recent", now=3.0), views.ledger_running([row], now=3.0),
                       views.ledger_queued([row], now=3.0), views.live_roster(live)):
        console.print(renderable)
    text = console.export_text(clear=False)  # what was printed, without rich's own styling
    assert_inert(text, "a ledger view")
    assert "\\x1b[2J" in text
