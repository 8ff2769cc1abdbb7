"""The live roster while results are awaited (``offload run``, the demo): each unit and each
child — done with its outcome, or running with its API calls, tool and idle time.

On a terminal it is redrawn in place (rich ``Live``) and removed when the wait ends, so the
scroll-back keeps only the results. On a pipe it prints nothing unless ``snapshots`` is set
(the demo), then a snapshot at most every ``SNAPSHOT_EVERY_S`` while something runs.
"""
from __future__ import annotations

import time

from rich.live import Live

from offload.session.driver import SessionDriver
from offload.cli.views import live_roster


class RosterView:
    SNAPSHOT_EVERY_S = 1.0

    def __init__(self, driver: SessionDriver, *, snapshots: bool = False, transient: bool = False) -> None:
        self.driver, self.ui = driver, driver.ui
        self.snapshots, self.transient = snapshots, transient
        self._live: Live | None = None
        self._last_snapshot = 0.0

    def _table(self):
        return live_roster(self.driver.units())

    def __enter__(self) -> RosterView:
        if self.ui.console.is_terminal:
            self._live = Live(self._table(), console=self.ui.console, refresh_per_second=8, transient=self.transient)
            self._live.__enter__()
        else:
            self.refresh()
        return self

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._table())
            return
        if not self.snapshots:
            return
        running = any(unit.get("status") == "running" for unit in self.driver.units())
        if running and time.monotonic() - self._last_snapshot >= self.SNAPSHOT_EVERY_S:
            self._last_snapshot = time.monotonic()
            self.ui.show(self._table())

    def __exit__(self, *exc_info: object) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(*exc_info)
