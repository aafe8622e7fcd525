"""The maintenance activity in memory (``store/maintenance.py``): each plugin's row, by
name, replaced (its totals added to) at each pass."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from ...core.maintenance import MaintenanceRun, Pass
from .rows import MemoryCore


class MemoryMaintenance(MemoryCore):
    """The memory store's maintenance activity (see the module's docstring)."""

    def record_maintenance(self, done: Pass) -> None:
        """The upsert: a first pass inserts the row, a later one replaces its last pass
        and adds to its totals."""
        with self.lock:
            now = self.time()
            failed = int(done.error is not None)
            last = MaintenanceRun(
                done.name,
                now - timedelta(seconds=max(0.0, done.elapsed_s)),
                now,
                dict(done.counts),
                done.jobs,
                done.error,
                1,
                failed,
                done.jobs,
                now,
            )
            old = self.maintenance_runs.get(done.name)
            if old is not None:
                last = dataclasses.replace(
                    last,
                    passes=old.passes + 1,
                    failures=old.failures + failed,
                    jobs_total=old.jobs_total + done.jobs,
                    since=old.since,
                )
            self.maintenance_runs[done.name] = last

    def maintenance(self) -> list[MaintenanceRun]:
        """``SELECT_MAINTENANCE``: every plugin's row, by name."""
        with self.lock:
            return sorted(self.maintenance_runs.values(), key=lambda run: run.name)
