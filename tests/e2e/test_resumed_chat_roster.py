"""``/agents`` in a resumed chat (issue 26, item 11) lists the session's delegations from the
ledger — the same ones ``/show`` finds — instead of "no background delegations"."""
from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import offload

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_agents_in_a_resumed_chat_lists_what_show_finds(cli):
    assert offload("config", "set", "delegation.independent_completions", "true").returncode == 0
    first = offload("run", "--demo-model", "Compare YAML and TOML, and check the Python version.")
    assert first.returncode == 0, first
    transcript = first.stdout + first.stderr
    session = re.search(r"session (sess_[0-9a-f]+)", transcript).group(1)
    units = sorted(set(re.findall(r"background result (deleg_[0-9a-f]+-\d) landed", transcript)))
    assert len(units) == 2, transcript
    other = offload("run", "--demo-model", "another session's work")  # not this session's: not listed
    other_unit = re.search(r"background result (deleg_[0-9a-f]+)", other.stdout + other.stderr).group(1)

    chat = cli("chat", "--resume", session, "--demo-model")
    chat.wait_for(r"resumed with \d+ stored message")
    start = chat.mark()
    chat.send("/agents")
    chat.wait_for(r"earlier in this session \(2\)", start=start)
    listing = "\n".join(chat.lines[start:])
    assert all(unit in listing for unit in units), listing
    assert "no background delegations" not in listing and other_unit not in listing
    chat.send(f"/show {units[0]}")
    chat.wait_for(re.escape(f"[ASYNC DELEGATION BATCH COMPLETE — {units[0]}]"), start=start)
    chat.send("/quit")
    assert chat.finish() == 0
