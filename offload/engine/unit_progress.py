"""What a running unit records as it goes, before it finalizes: each step of its background
children (``offload.agent.step_log``, fenced by the ledger; parked at a hand-over's safe point,
``engine.handover``) and each finished child (kept at once, so a crash loses only unfinished
children), with a batch unit's one interim failure notice.

Mixed into ``Delegations`` (``engine.engine``): it reads that class's record table under its
``lock`` and follows its rule -- collect under the lock, write and publish outside it.
"""
from __future__ import annotations

import time
from typing import Any

from offload.engine.events import failure_notice, unit_task_indexes
from offload.engine.liveness import current_owner
from offload.engine.log import logger
from offload.engine.observers import notify
from offload.engine.states import ACTIVE_STATES, FAILED_STATES

Record = dict[str, Any]


class UnitProgress:
    """``record_step(s)`` and ``record_unit_child`` of ``Delegations``."""

    lock: Any
    records: dict[str, Record]
    handover: Any
    health: Any
    publish: Any

    def record_step(self, delegation_id: str, task_index: int, seq: int, kind: str, payload: dict[str, Any]) -> bool:
        """Write one step of a background child durably (``offload.agent.step_log``); False only
        when the ledger refused it because this process no longer owns the unit."""
        return self.record_steps(delegation_id, task_index, [(seq, kind, payload)])

    def record_steps(self, delegation_id: str, task_index: int, steps: list[tuple[int, str, dict[str, Any]]]) -> bool:
        """``record_step`` for several ``(seq, kind, payload)`` steps of one child, in one ledger
        write -- but while its unit is handed over, the results before a reply or start mark are
        written first and the rest waits at that safe point (``engine.handover``)."""
        ledger = self._unit_ledger(delegation_id)
        if ledger is None:
            return True  # nothing durable to fence against: the child goes on
        cut = next((i for i, (_, kind, _) in enumerate(steps) if self.handover.parks(delegation_id, kind)), len(steps))
        kept = True
        for parked, part in ((False, steps[:cut]), (True, steps[cut:])):
            if not part:
                continue
            if parked:
                self.handover.park()
            self.handover.track(delegation_id, task_index, part, "tool_start")  # running from now on
            kept = ledger.append_steps(delegation_id, task_index, part, current_owner(), time.time()) and kept
            self.handover.track(delegation_id, task_index, part, "tool_result")  # its result is written
        return kept

    def _unit_ledger(self, delegation_id: str) -> Any:
        with self.lock:
            record = self.records.get(delegation_id)
            return None if record is None else record.get("_ledger")

    def record_unit_child(self, delegation_id: str, entry: dict[str, Any]) -> bool:
        """Record one finished child of a running unit, in memory and durably, right away."""
        with self.lock:
            record = self.records.get(delegation_id)
            if record is None or record["status"] not in ACTIVE_STATES:
                return False
            partial = [e for e in record.get("_partial_results", []) if e.get("task_index") != entry.get("task_index")]
            record["_partial_results"] = [*partial, entry]
            ledger = record.get("_ledger")
            notice = self._failure_notice_locked(record, entry)
        if notice is not None:
            self._publish_notice(notice)
        if ledger is None:
            return False
        notify("child_recorded", delegation_id, entry=entry)
        try:
            return ledger.record_unit_child(delegation_id, entry, time.time())
        except Exception as exc:  # best effort: a failing record must never fail the unit runner
            self.health.report(ledger, "recording a finished child", exc,
                               "A crash before the unit ends would report this child as unknown.")
            return False

    def _failure_notice_locked(self, record: Record, entry: dict[str, Any]) -> dict[str, Any] | None:
        """The unit's interim notice if ``entry`` is its first failed child and siblings still run.

        Once per unit: a rejected model fails every child at once, and one warning says it all."""
        if (not record.get("is_batch") or record.get("_failure_noticed")
                or entry.get("status") not in FAILED_STATES
                or len(record["_partial_results"]) >= len(unit_task_indexes(record))):
            return None
        record["_failure_noticed"] = True
        return failure_notice(dict(record), entry)

    def _publish_notice(self, notice: dict[str, Any]) -> None:
        try:
            self.publish(notice)  # in memory only: the final event is what the ledger keeps
        except Exception:
            logger.exception("Async delegation %s: could not queue the interim failure notice",
                             notice.get("delegation_id"))
            return
        notify("failure_notice", notice["delegation_id"], event=notice)
