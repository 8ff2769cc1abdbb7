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


@pytest.mark.parametrize("resume", ["auto", "never"])
def test_a_second_offload_delivers_what_a_first_one_closed_while_its_child_ran(tmp_path, finalized, resume):
    release = threading.Event()

    def child(request):
        release.wait(WAIT_S)
        return text_reply("the late answer")

    home = tmp_path / "home"
    on_postgres = os.environ.get("OFFLOAD_TEST_LEDGER") == "postgresql"
    with ScriptedModelServer(child) as server:
        settings = {"delegation": {"resume": resume}}
        first = open_offload(home, server, **settings)
        handle = first.delegate(QUICK, session="s")
        assert server.wait_for_requests(1, timeout_s=WAIT_S)  # the child is at work
        first.close()  # its child keeps running and records its result when it ends
        release.set()
        assert finalized.wait(WAIT_S)
        with open_offload(home, server, **settings) as second:
            [again] = drain(second, "s")
            assert again.id == handle.id
            if not on_postgres:  # the closed instance's child recorded its result
                assert "the late answer" in again.text and len(server.requests) == 1
            elif resume == "never":
                assert again.state == "unknown"  # closing ended the owner's lease: recovered, the late write fenced
            else:  # ... and resumed by the second instance: its model call in flight issued once more
                assert again.state == "completed" and "the late answer" in again.text
                assert len(server.requests) == 2 and second.ledger().get(handle.id).task["durable"]["resumes"] == 1


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
