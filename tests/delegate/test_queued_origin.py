"""A queued unit (``delegation.run_on: workers``) carries its ``Origin`` whole, and still
writes the ``routing`` a previous worker reads; a unit queued by a previous parent (routing
only) is read into the same origin."""
from __future__ import annotations

from offload.ledger import DispatchRow, LedgerRow
from offload.origin import Origin
from offload.subagents.queue import legacy_routing, queued_origin

ORIGIN = Origin.capture("agent:main:telegram:dm:7", "parent-1", ui_session_id="ui-2", user_id="u-7", scope_id="s")


def _claimed(row: DispatchRow) -> LedgerRow:
    return LedgerRow(row.delegation_id, row.origin_session, "running", row.dispatched_at,
                     origin_ui_session_id=row.origin_ui_session_id, origin_session_id=row.origin_session_id,
                     parent_session_id=row.parent_session_id, task=row.task)


def test_a_queued_unit_carries_its_origin_whole() -> None:
    row = DispatchRow.of("deleg_q1", ORIGIN, 1.0, {"goals": ["g"], "routing": legacy_routing(ORIGIN)})
    assert (row.origin_session, row.parent_session_id, row.origin_ui_session_id) == (
        "agent:main:telegram:dm:7", "parent-1", "ui-2")
    assert queued_origin(_claimed(row)) == ORIGIN


def test_a_unit_queued_by_the_previous_version_is_read_from_its_routing() -> None:
    # the spec as the main of 2026-12-04 (ec1952d) queued it: routing only, identity under "origin"
    old = {"goals": ["g"], "routing": {"session_key": "agent:main:telegram:dm:7", "parent_session_id": "parent-1",
                                       "origin_ui_session_id": "ui-2", "origin_session_id": "",
                                       "origin": {"user_id": "u-7", "scope_id": "s"}}}
    row = DispatchRow("deleg_q2", "agent:main:telegram:dm:7", 1.0, old, "ui-2", "", "parent-1")
    assert queued_origin(_claimed(row)) == ORIGIN
    assert legacy_routing(ORIGIN) == old["routing"]  # what this version writes, a previous worker reads
