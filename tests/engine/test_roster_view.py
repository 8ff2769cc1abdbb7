"""The roster's listing view as pure functions: ``snapshot`` copies each record once (public
keys decided once per key layout) with its progress age; ``finish`` samples live activity
outside the lock and adds stall fields. Checked against the plain definition of the view."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from offload.engine import roster
from offload.engine.states import ACTIVE_STATES

NOW_MONO = 100.0


@pytest.fixture(autouse=True, scope="module")
def own_layout_cache():
    """These tests make hundreds of key layouts: they get a cache of their own, so the
    engine's records in later tests still find room in the real one."""
    saved, roster._public_keys_by_layout = roster._public_keys_by_layout, {}
    yield
    roster._public_keys_by_layout = saved


def _record(**extra):
    record = {"delegation_id": "d1", "status": "running", "goal": "g", "_progress_ts": 90.0,
              "progress_fn": lambda: (((3, "terminal", None),), True), "interrupt_fn": print, "_context": object()}
    record.update(extra)
    return record


def _views(*records, now_mono=NOW_MONO):
    return roster.snapshot(records, now_mono).finish()


def _plain_view(record, now_mono=NOW_MONO):
    """The view by its definition (what the listing did before it was made linear)."""
    item = {k: v for k, v in record.items() if not k.startswith("_") and k not in ("interrupt_fn", "progress_fn")}
    if record.get("status") in ACTIVE_STATES:
        item["seconds_since_progress"] = round(now_mono - record.get("_progress_ts", now_mono), 2)
        roster._add_live_activity(item, record.get("progress_fn"))
    if record.get("status") in ("stalling", "stalled"):
        stall = {"stalled_after_quiet_seconds": record.get("_stall_quiet_seconds"),
                 "stall_threshold_seconds": record.get("_stall_threshold_seconds"),
                 "stall_in_tool": record.get("_stall_in_tool")}
        item.update({k: v for k, v in stall.items() if v is not None})
    return item


def test_a_view_lists_public_keys_only_with_progress_age_and_live_activity():
    (item,) = _views(_record())
    assert list(item) == ["delegation_id", "status", "goal", "seconds_since_progress", "in_tool", "children_activity"]
    assert item["seconds_since_progress"] == 10.0 and item["in_tool"] is True
    assert item["children_activity"] == [{"api_calls": 3, "current_tool": "terminal"}]


def test_records_of_one_layout_share_the_public_keys_but_not_their_values():
    first, second = _record(), _record(delegation_id="d2", goal="other")
    assert [item["goal"] for item in _views(first, second)] == ["g", "other"]
    first["summary"] = "added later"  # a new layout: its public keys are worked out anew
    first["_private_later"] = 1
    (item,) = _views(first)
    assert item["summary"] == "added later" and "_private_later" not in item


def test_samplers_run_in_finish_not_in_the_snapshot_taken_under_the_lock():
    calls = []
    record = _record(progress_fn=lambda: (calls.append(1), (None, False))[1])
    listing = roster.snapshot([record], NOW_MONO)
    record["goal"] = "changed after the snapshot"  # the engine may change it once its lock is released
    assert calls == []
    (item,) = listing.finish()
    assert calls == [1] and item["goal"] == "g" and item["in_tool"] is False


def test_a_view_is_a_copy_and_a_stalled_unit_shows_its_stall_fields_without_sampling():
    def sampler():
        raise AssertionError("a finished unit's sampler must not be called")
    record = _record(status="stalled", progress_fn=sampler, _stall_quiet_seconds=600.0,
                     _stall_threshold_seconds=300.0, _stall_in_tool=None)
    (item,) = _views(record)
    item["goal"] = "changed"
    assert record["goal"] == "g"
    assert item["stalled_after_quiet_seconds"] == 600.0 and item["stall_threshold_seconds"] == 300.0
    assert "stall_in_tool" not in item  # unknown is left out, not listed as null
    assert "seconds_since_progress" not in item and "children_activity" not in item


def test_a_stalling_unit_lists_activity_then_stall_fields_and_a_raising_sampler_leaves_no_activity():
    def broken():
        raise RuntimeError("unreadable")
    stalling = _record(status="stalling", _stall_threshold_seconds=300.0, _stall_in_tool="terminal")
    quiet = _record(delegation_id="d2", progress_fn=broken)
    del quiet["_progress_ts"]  # never sampled yet: no age
    first, second = _views(stalling, quiet)
    assert list(first)[-4:] == ["in_tool", "children_activity", "stall_threshold_seconds", "stall_in_tool"]
    assert second["seconds_since_progress"] == 0.0 and "in_tool" not in second


def test_more_key_layouts_than_the_cache_holds_still_give_right_views(monkeypatch):
    monkeypatch.setattr(roster, "_public_keys_by_layout", {})
    records = [_record(**{f"extra_{i}": i, f"_hidden_{i}": i}) for i in range(roster._LAYOUT_CACHE_MAX + 10)]
    views = _views(*records)
    assert len(roster._public_keys_by_layout) == roster._LAYOUT_CACHE_MAX
    assert all(view[f"extra_{i}"] == i and f"_hidden_{i}" not in view for i, view in enumerate(views))


_KEYS = st.sampled_from(["delegation_id", "goal", "summary", "interrupt_fn", "progress_fn", "_progress_ts",
                         "_stall_quiet_seconds", "_stall_threshold_seconds", "_stall_in_tool", "_started", "toolsets"])
_VALUES = st.one_of(st.none(), st.integers(-5, 5), st.floats(0, 200), st.text(max_size=3),
                    st.lists(st.integers(), max_size=2))
_SAMPLERS = st.sampled_from([None, lambda: (((1, "t", None),), True), lambda: (7, False), lambda: 1 / 0])


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(_KEYS, _VALUES, max_size=8),
                          st.sampled_from(["running", "stalling", "stalled", "finalizing", "completed"]),
                          _SAMPLERS, st.floats(0, 100)), max_size=6))
def test_views_equal_the_plain_definition_keys_and_order_included(shapes):
    records = []
    for fields, status, sampler, progress_ts in shapes:
        record = dict(fields, status=status)
        record["progress_fn"] = sampler
        record["_progress_ts"] = progress_ts
        records.append(record)
    views = _views(*records)
    assert [list(view.items()) for view in views] == [list(_plain_view(r).items()) for r in records]


@pytest.mark.parametrize("status", ["finalizing", "completed"])
def test_an_inactive_unit_has_no_live_fields(status):
    (item,) = _views(_record(status=status, progress_fn=lambda: 1 / 0))
    assert set(item) == {"delegation_id", "status", "goal"}
