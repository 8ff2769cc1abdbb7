"""What counts against ``delegation.max_resumes`` (issue 44): a death does, a hand-over by a live
owner (a client closed) does not -- else closing a client a few times would end its work
``unknown``, while the bound is there for a unit whose owners keep dying."""
from __future__ import annotations

from types import SimpleNamespace

from offload.subagents import resume

CFG = SimpleNamespace(resume="auto", max_resumes=1)


def _row(mark: dict) -> SimpleNamespace:
    return SimpleNamespace(task={"durable": {"spec": {"goals": ["g"], "tasks": [{"goal": "g"}]}, **mark}},
                           result=None, owner_pid=4242, extra={}, updated_at=1.0, dispatched_at=0.5)


def test_a_death_counts_against_max_resumes():
    queued, why = resume.resume_task(_row({"resumes": 0}), CFG)
    assert queued["durable"]["resumes"] == 1 and why is None
    queued, why = resume.resume_task(_row({"resumes": 1}), CFG)
    assert queued is None and "delegation.max_resumes is 1" in why


def test_a_hand_over_is_counted_apart_and_never_runs_a_unit_out_of_resumes():
    for handovers in range(5):
        task = resume.handed_task(_row({"resumes": 1, "handovers": handovers}), CFG)
        assert task is not None, "a unit already resumed max_resumes times is still handed over"
        mark = task["durable"]
        assert (mark["resumes"], mark["handovers"], mark["after"]["handed_over"]) == (1, handovers + 1, True)
