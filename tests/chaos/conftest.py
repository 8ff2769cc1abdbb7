"""Chaos suite fixtures and the end-of-session counts report (see ``support.py``)."""
from __future__ import annotations

import json

import pytest

from tests.chaos.support import COUNTS, LONG, drain_queue, summary_lines
from tools import async_delegation as ad
from tools.process_registry import process_registry


@pytest.fixture
def engine():
    """A clean engine (records, pool, ledger connections, log-once memory) and an empty bus."""
    ad._reset_for_tests()
    drain_queue()
    process_registry._completions_restored = False
    yield ad
    ad._reset_for_tests()
    drain_queue()
    process_registry._completions_restored = False


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not COUNTS:
        return
    mode = "long" if LONG else "bounded"
    terminalreporter.write_sep("=", f"chaos counts ({mode} mode)")
    for line in summary_lines():
        terminalreporter.write_line(line)
    try:
        out = config._tmp_path_factory.getbasetemp() / "chaos-counts.json"
        out.write_text(json.dumps({"mode": mode, **COUNTS}, indent=2, default=str))
        terminalreporter.write_line(f"counts written to {out}")
    except Exception as exc:  # the report is a convenience; never fail the run over it
        terminalreporter.write_line(f"could not write chaos-counts.json: {exc}")
