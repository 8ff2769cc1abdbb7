"""The timeline's lanes and geometry (offload/dashboard/timeline.py), pure: where a queued
wait, the children, the marks and the delivery fall on the axis."""
from __future__ import annotations

from offload.dashboard.timeline import NARROW, WIDE, geometry, lanes, offset_label
from offload.ledger import JournalEntry

T0 = 1_000_000.0


def _unit(**over):
    unit = {"id": "deleg_t", "status": "completed", "dispatched_at": T0, "completed_at": T0 + 20,
            "delivery_state": "delivered", "claimed_at": T0 + 21, "delivered_at": T0 + 22,
            "children": [{"index": 0, "number": 1, "goal": "a", "status": "completed", "duration_s": 8.0},
                         {"index": 1, "number": 2, "goal": "b", "status": "failed", "duration_s": None}]}
    unit.update(over)
    return unit


def test_a_unit_that_waited_is_queued_until_it_started_and_its_children_run_from_then():
    entries = [JournalEntry("deleg_t", T0 + 5, "start"),
               JournalEntry("deleg_t", T0 + 9, "message", 0, {"role": "assistant", "content": "",
                                                              "tool_calls": [{"id": "c", "name": "grep"}]}),
               JournalEntry("deleg_t", T0 + 12, "child_end", 0, {"status": "completed"})]
    unit_lane, first, second, delivery = lanes(_unit(), entries, now=T0 + 100)["lanes"]
    assert unit_lane["queued"] == (T0, T0 + 5) and unit_lane["start"] == T0 + 5
    assert (first["start"], first["end"]) == (T0 + 5, T0 + 12)  # the journal's end wins over the duration
    assert [m["kind"] for m in first["marks"]] == ["tool"]
    assert (second["start"], second["end"]) == (T0 + 5, T0 + 20)  # no duration: it ended with the unit
    assert [m["kind"] for m in delivery["marks"]] == ["claim", "delivered"]


def test_a_short_wait_draws_no_queue_and_a_finished_unit_stops_at_its_last_event():
    drawn = lanes(_unit(), [JournalEntry("deleg_t", T0 + 0.1, "start")], now=T0 + 10_000)
    assert drawn["lanes"][0]["queued"] is None and drawn["t_end"] == T0 + 22  # not "now"
    for layout in (WIDE, NARROW):
        g = geometry(drawn, layout)
        assert all(0 <= lane["x1"] <= lane["x2"] <= layout.width for lane in g["lanes"])
        assert g["ticks"][0]["label"] == "dispatch" and g["ticks"][1]["label"] == offset_label(5)


def test_a_running_unit_runs_to_now_with_open_bars():
    running = _unit(status="running", completed_at=None, delivery_state="pending", claimed_at=None, delivered_at=None,
                    children=[{"index": 0, "number": 1, "goal": "a", "status": "running", "duration_s": None}])
    unit_lane, child, delivery = lanes(running, [], now=T0 + 30)["lanes"]
    assert unit_lane["open"] and child["open"] and child["end"] == T0 + 30
    assert delivery["word"] == "after the finish" and delivery["tone"] == "quiet"


def test_a_resumed_unit_is_drawn_from_its_first_dispatch_with_the_death_and_the_resume_marked():
    after = {"pid": 77, "host": "h", "last_write_at": T0 - 30}
    child = {"resumes": 1, "after": after, "at": T0, "from_step": 2, "model_calls_reissued": 0,
             "unknown_calls": ["run_command"], "calls_rerun": 0, "replies_kept": 1}
    unit = _unit(resumed={"resumes": 1, "after": after, "at": T0, "first_dispatched_at": T0 - 40},
                 children=[{"index": 0, "number": 1, "goal": "a", "status": "completed", "duration_s": 8.0,
                            "resumed": child}])
    drawn = lanes(unit, [JournalEntry("deleg_t", T0 + 0.2, "start")], now=T0 + 100)
    unit_lane, first, _delivery = drawn["lanes"]
    assert drawn["t0"] == T0 - 40 and unit_lane["queued"] is None  # it ran from its first dispatch
    assert [(m["kind"], m["at"]) for m in unit_lane["marks"]] == [("lost", T0 - 30), ("resume", T0), ("finish", T0 + 20)]
    [resume] = [m for m in first["marks"] if m["kind"] == "resume"]
    assert resume["at"] == T0 and resume["label"].startswith("↻ resumed from step 2 after pid 77 on host h died")
    assert (first["start"], first["end"]) == (T0 - 40, T0 + 8)  # its 8 s ran after the resume
