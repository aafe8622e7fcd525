"""The cleanup service: remove ended jobs past their retention, in batches.

A maintenance plugin (``maintenance.py``): ``Tracker.cleanup()``, the task
``celery_tracked.cleanup`` on ``tracked_cleanup_schedule`` (daily at 03:17 by default),
``celery tracked cleanup``. Each run assembles the app's
:class:`~celery_tracked.core.cleanup.Policy` (:meth:`Cleanup.policy`). Each of its sweeps
(``core/cleanup.py``) is removed in batches of ``tracked_cleanup_batch_size`` rows, one
transaction each, with the rows' events (``store/cleanup.py``); then the Redis guard entries
of the removed keys are dropped (compare-and-delete: only while they still name the
removed job; only those of jobs created within ``tracked_guard_ttl_seconds``: older ones
have expired), so the next enqueue of such a key creates a new job at once. ``pending``,
``processing`` and ``retrying`` rows are never touched.

Per-task retention (``retention=`` on the decorator) is read from the tasks the app knows
in the process running the cleanup: a task whose module is not imported there is cleaned
with the app's defaults. Knows nothing of Celery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

from ..core.cleanup import ENDED, Policy, Sweep, policy_of, sweeps
from ..core.errors import GuardError, StoreError
from ..core.guard import Guard
from ..core.jobs import PURGE_START, Removed, utcnow
from ..core.ports import CleanupStore
from ..core.settings import Settings
from .maintenance import Maintenance, Parts

logger = logging.getLogger("celery_tracked")


@dataclass
class CleanupReport:
    """What one cleanup removed (a dry run: what it would remove)."""

    #: rows removed per status (``completed``, ``failed``, ``cancelled``)
    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENDED, 0))
    #: their ``background_job_events`` rows (not counted by a dry run)
    events: int = 0
    #: Redis guard entries dropped with them
    guard_entries: int = 0
    #: transactions that removed rows
    batches: int = 0
    duration_s: float = 0.0
    dry_run: bool = False

    @property
    def total(self) -> int:
        """Rows removed, every status together."""
        return sum(self.removed.values())

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values."""
        return {
            "removed": dict(self.removed),
            "total": self.total,
            "events": self.events,
            "guard_entries": self.guard_entries,
            "batches": self.batches,
            "duration_s": round(self.duration_s, 3),
            "dry_run": self.dry_run,
        }

    def describe(self) -> str:
        """One line for the log."""
        per_status = ", ".join(f"{status} {n}" for status, n in self.removed.items())
        verb = "would remove" if self.dry_run else "removed"
        return (
            f"cleanup {verb} {self.total} jobs ({per_status}), {self.events} events, "
            f"{self.guard_entries} guard entries, in {self.batches} batches, "
            f"{self.duration_s:.1f} s"
        )


def task_retentions(tasks: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(task name, retention option)`` of the tracked tasks among ``tasks`` (task
    descriptions, or an app's tasks: those with a ``retention`` option)."""
    return [(name, task.retention) for name, task in tasks.items() if hasattr(task, "retention")]


#: Clocks of producers and of the cleanup may differ by this much (guard entry ages).
CLOCK_SKEW = timedelta(hours=1)


def guard_entry(guard: Guard, job: Removed, live_since: datetime) -> tuple[str, str] | None:
    """The Redis guard entry ``(key, token)`` a removed job may still hold (its key's, as
    ``producer.guard_of`` names it), or None: a job without idempotency key (its guard
    only covered its enqueue, a minute), or created before ``live_since``. Only a job's
    own enqueue writes an entry naming it, with a TTL of at most
    ``tracked_guard_ttl_seconds``: the entry of a job created longer ago has expired."""
    if job.idempotency_key is None or job.created_at < live_since:
        return None
    return guard.key("guard", job.job_type, job.idempotency_key), job.id


class Cleanup(Maintenance):
    """Removes the ended jobs the app's :class:`Policy` no longer keeps."""

    name: ClassVar[str] = "cleanup"
    summary: ClassVar[str] = (
        'Remove the ended jobs past their retention (docs/operations.md, "Retention and '
        'cleanup"), in batches; a progress bar on a terminal.'
    )
    moved: ClassVar[tuple[str, ...]] = ("total",)

    def __init__(
        self,
        store: CleanupStore,
        guard: Guard,
        settings: Settings,
        tasks: Callable[[], Mapping[str, Any]],
    ) -> None:
        self.store = store
        self.guard = guard
        self.settings = settings
        #: the app's tasks (their ``retention`` options), read at each run
        self.tasks = tasks
        self.batch_size = settings.cleanup_batch_size
        self.guard_ttl = timedelta(seconds=settings.guard_ttl_seconds)

    @classmethod
    def schedule(cls, settings: Settings) -> object:
        return settings.cleanup_schedule

    @classmethod
    def build(cls, parts: Parts) -> Cleanup:
        return cls(parts.store, parts.guard, parts.settings, parts.platform.descriptions)

    def policy(self) -> Policy:
        """The app's policy: ``tracked_retention_completed_days``,
        ``tracked_retention_failed_days`` (failed and cancelled), each task's
        ``retention=`` (the tasks this process has imported), and
        ``tracked_retention_keep_newest``."""
        settings = self.settings
        return policy_of(
            timedelta(days=settings.retention_completed_days),
            timedelta(days=settings.retention_failed_days),
            task_retentions(self.tasks()),
            settings.retention_keep_newest,
        )

    def run(
        self,
        now: datetime | None = None,
        *,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
    ) -> CleanupReport:
        """Remove (``dry_run``: count) what the app's :meth:`policy` no longer keeps at
        ``now`` (default: the database's clock).

        ``on_batch(n)`` is called after each batch with the rows it removed (a dry run:
        once per sweep, with its count).

        Raises:
            StoreError: the database failed; the batches before it stay removed (and are
                logged), the next run goes on.
        """
        policy = self.policy()
        started = time.monotonic()
        report = CleanupReport(dry_run=dry_run)
        try:
            boundaries = (
                self.store.keep_boundaries(policy.keep_newest) if policy.keep_newest else []
            )
            for sweep in sweeps(policy, now or self.store.clock(), boundaries):
                if dry_run:
                    found = self.store.purge_count(sweep)
                    report.removed[sweep.status] += found
                    if on_batch is not None:
                        on_batch(found)
                else:
                    self._sweep(sweep, report, on_batch)
        except StoreError as exc:
            report.duration_s = time.monotonic() - started
            logger.warning("%s, then failed: %s", report.describe(), exc)
            raise
        report.duration_s = time.monotonic() - started
        logger.info(report.describe(), extra={"cleanup": report.as_dict()})
        return report

    def _sweep(
        self, sweep: Sweep, report: CleanupReport, on_batch: Callable[[int], None] | None
    ) -> None:
        cursor: tuple[datetime, str] | None = PURGE_START
        while cursor is not None:
            batch = self.store.purge_batch(sweep, cursor, self.batch_size)
            cursor = batch.cursor
            if not batch.removed:
                continue
            report.batches += 1
            report.removed[sweep.status] += len(batch.removed)
            report.events += batch.events
            report.guard_entries += self._release(batch.removed)
            if on_batch is not None:
                on_batch(len(batch.removed))

    def _release(self, removed: Iterable[Removed]) -> int:
        live_since = utcnow() - self.guard_ttl - CLOCK_SKEW  # Redis expires on real time
        found = (guard_entry(self.guard, job, live_since) for job in removed)
        entries = [e for e in found if e is not None]
        try:
            return self.guard.release_all(entries)
        except GuardError as exc:
            logger.warning(
                "cleanup could not drop %d guard entries of removed jobs: %s (each expires "
                "after tracked_guard_ttl_seconds)",
                len(entries),
                exc,
            )
            return 0
