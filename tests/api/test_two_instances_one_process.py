"""Two ``Offload``s on one home in one process deliver like two processes: what the first left
pending (taken and not acknowledged, left mid-iteration, or never taken) the second delivers,
and a closed instance refuses ``results`` as it refuses ``delegate``."""
from __future__ import annotations

import os
import threading

import pytest

from offload import RequestError
from offload.engine.observers import add_observer
from offload.testing import ScriptedModelServer
from offload.testing.model_server import text_reply
from tests.api.test_api import QUICK, WAIT_S, drain, model, open_offload  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def finalized():
    """An event set once a unit finalized (its result recorded and on its runtime's bus)."""
    done = threading.Event()
    unobserve = add_observer(lambda kind, _did, _fields: kind == "finalized" and done.set())
    yield done
    unobserve()


@pytest.mark.parametrize("leave", ["break", "exception", "next_without_ack", "never_taken"])
def test_a_second_offload_delivers_what_the_first_left_pending(tmp_path, model, finalized, leave):
    home = tmp_path / "home"
    first = open_offload(home, model)
    handle = first.delegate(QUICK, session="s")
    if leave == "never_taken":
        assert finalized.wait(WAIT_S)
    elif leave == "next_without_ack":
        assert next(first.results("s", timeout_s=WAIT_S)).id == handle.id
    elif leave == "break":
        for _ in first.results("s", timeout_s=WAIT_S):
            break
    else:
        with pytest.raises(KeyError):
            for _ in first.results("s", timeout_s=WAIT_S):
                raise KeyError("the caller's loop body failed")
    first.close()
    with open_offload(home, model) as second:
        [again] = drain(second, "s")
        assert again.id == handle.id and "3 files" in again.text
    with open_offload(home, model) as third:
        assert list(third.results("s", timeout_s=WAIT_S)) == []


def test_a_second_offload_delivers_what_a_first_one_closed_while_its_child_ran(tmp_path, finalized):
    release = threading.Event()

    def child(request):
        release.wait(WAIT_S)
        return text_reply("the late answer")

    home = tmp_path / "home"
    with ScriptedModelServer(child) as server:
        # About the closed owner's late write (on PostgreSQL: fenced, the row recovered unknown),
        # not about resuming the child: that is tests/e2e/test_durable_resume_e2e.py's.
        never = {"delegation": {"resume": "never"}}
        first = open_offload(home, server, **never)
        handle = first.delegate(QUICK, session="s")
        assert server.wait_for_requests(1, timeout_s=WAIT_S)  # the child is at work
        first.close()  # its child keeps running and records its result when it ends
        release.set()
        assert finalized.wait(WAIT_S)
        with open_offload(home, server, **never) as second:
            [again] = drain(second, "s")
            assert again.id == handle.id
            if os.environ.get("OFFLOAD_TEST_LEDGER") == "postgresql":
                assert again.state == "unknown"  # closing ended the owner's lease: recovered, the late write fenced
            else:
                assert "the late answer" in again.text


def test_a_closed_offload_refuses_results_and_takes_nothing(tmp_path, model, finalized):
    home = tmp_path / "home"
    first = open_offload(home, model)
    handle = first.delegate(QUICK, session="s")
    assert finalized.wait(WAIT_S)
    first.close()
    with pytest.raises(RequestError, match="closed"):
        first.results("s")
    with open_offload(home, model) as second:
        assert [r.id for r in drain(second, "s")] == [handle.id]
