"""The ``Tracker`` facade's Celery-free part: :class:`BaseTracker`.

It holds one app's services, built by the composition root (``wiring.py``'s ``build``:
settings, job store, guard and notifier, hooks, the ``Producer``, the ``Runner``, the
maintenance plugins of ``wiring.MAINTENANCE``), privately, and offers only methods: the
read side ``get_job``, ``history``, ``wait``, ``stats``, ``throughput``, ``jobs``,
``pipeline``; the operations ``cancel``, ``retry``, ``retry_many``, ``cancel_many`` and
their log (``record_action``, ``actions``); pauses, circuits and the maintenance activity
(``controls.py``); one recorded pass of each plugin (``run_maintenance(name)``);
``add_hook`` and ``close``.
What it needs of Celery (the tasks' descriptions, publishing a job's message, the
broker's view, stopping a run) comes through the platform port (``core/platform.py``);
the public :class:`~celery_tracked.Tracker` (``adapter/celery_tracker.py``) is this class
with Celery's implementation of that port.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload
from uuid import UUID

from .controls import Controls
from .core.actions import Action, Done
from .core.bulk import BulkReport
from .core.errors import JobNotFound
from .core.finder import (
    DEFAULT_PAGE,
    Filters,
    JobPage,
    check_limit,
    decode_cursor,
    filter_of,
    page_of,
)
from .core.hooks import Hooks
from .core.jobs import EnqueueResult, Job, JobEvent
from .core.messages import as_job_id
from .core.pipelines import Pipeline
from .core.platform import Platform
from .core.ports import Store
from .core.settings import Settings
from .core.throughput import SAMPLE, WINDOW_S
from .core.validation import check_now
from .services import actions, bulk, throughput, waiting
from .services.cancelling import Shown
from .services.cleanup import Cleanup, CleanupReport
from .services.maintenance import Maintenance, Report
from .services.reaper import Reaper, ReapReport
from .services.relay import Relay, RelayReport
from .services.schedule import Scheduler
from .wiring import CelerySide, GuardBackend, build

if TYPE_CHECKING:
    from typing_extensions import Unpack


logger = logging.getLogger("celery_tracked")

R = TypeVar("R")
M = TypeVar("M", bound=Maintenance)


class BaseTracker(Controls):
    """The tracking side of one app, given its settings and its platform (``platform.py``).

    It has methods only: its services are private (``_services``, the :class:`Services`
    of ``wiring.build``: reached by tests only, as their documented seam), ``settings`` is
    the settings it was built from (a read-only value, not a service), and
    ``celery_side`` the narrow part of the services the Celery adapter and the CLI use
    (not for users). ``store`` and ``guard`` replace the ones the settings name (tests).
    """

    #: ``wait`` re-reads the row at least this often, whatever the notifications do.
    REREAD_S = 1.0

    def __init__(
        self,
        settings: Settings,
        platform: Platform,
        *,
        store: Store | None = None,
        guard: GuardBackend | None = None,
    ) -> None:
        self._services = build(settings, platform, store=store, guard=guard)
        self._celery_side = self._services.celery_side()

    @property
    def settings(self) -> Settings:
        """The settings this tracker was built from (a frozen value)."""
        return self._services.settings

    @property
    def celery_side(self) -> CelerySide:
        """What the Celery adapter and the CLI use of the services (``wiring.py``); not
        part of the user's API."""
        return self._celery_side

    def add_hook(self, hook: Hooks) -> None:
        """Register ``hook`` (after the built-in notification and logging hooks)."""
        self._services.hooks.add(hook)

    # -- reads ------------------------------------------------------------------------

    def get_job(self, job_id: str | UUID) -> Job | None:
        """The job's row, or None. Raises ``StoreError`` if the database fails.

        Every method taking a ``job_id`` accepts a ``str`` or a ``uuid.UUID``; another type
        is a ``TypeError``, a string holding a NUL byte ``InvalidPayload``.
        """
        return self._services.store.get(as_job_id(job_id))

    def history(self, job_id: str | UUID) -> list[JobEvent]:
        """The job's events, oldest first."""
        return self._services.store.events(as_job_id(job_id))

    def cancel(
        self,
        job_id: str | UUID,
        reason: str = "cancelled",
        *,
        log_message: str | None = None,
        queue: str | None = None,
        job_type: str | None = None,
        level: int = logging.INFO,
        revision: int | None = None,
        running: bool = False,
    ) -> bool:
        """pending | retrying → cancelled; False if the job is in any other status.

        Never interrupts a running job, unless ``running=True``: then a ``processing``
        job's run is asked to stop (terminated where the pool can, and the body's
        ``self.cancelled()`` turns True) and the job ends ``cancelled`` once its run is
        gone, whatever the body did (``stopping.py``); True once asked.
        A cancelled job's message, when delivered, runs no body. ``reason`` is stored in
        ``error_message`` (URL credentials and secret ``key=value`` pairs masked);
        ``revision``: only while the job's message is that one (an expired message a
        debounce replaced cancels nothing); the other keywords only shape the log.
        """
        job_id = as_job_id(job_id)
        reason = self.settings.masking.mask(reason)  # stored, logged, shown: no secret
        if running:
            return self._services.stopper.cancel_running(job_id, reason)
        shown = Shown(log_message, queue, job_type, level)
        return self._services.canceller(job_id, reason, revision=revision, shown=shown)

    def retry(
        self,
        job_id: str | UUID,
        *,
        arguments: Mapping[str, Any] | None = None,
        attempts: int | None = None,
        deadline: datetime | timedelta | float | None = None,
    ) -> bool:
        """failed | cancelled → pending, and its message sent again: the same job (same
        id), its history kept. False if the job is in any other status.

        ``arguments``: the values of the arguments stored redacted (by parameter name),
        required for such a job and refused for any other argument. ``attempts``: how many
        more attempts it gets (default: the task's ``max_attempts``). ``deadline``: a new
        deadline (an aware ``datetime``, or a ``timedelta``/seconds from now on the
        database's clock), replacing the job's; without one its own is kept, and a job
        whose deadline has passed (one cancelled ``DeadlineExceeded``) is refused.

        Raises:
            JobNotFound: no job has this id.
            RetryRefused: redacted arguments not given (or others given), a newer job
                holds its idempotency key, or its deadline has passed and no new one was
                given; nothing was changed.
            InvalidPayload: a bad ``attempts`` or ``deadline`` (TypeError: of another type).
            EnqueueError: the broker refused the message; the job is back as it was.
        """
        return self._services.resender.retry(as_job_id(job_id), arguments, attempts, deadline)

    def jobs(
        self, *, limit: int = DEFAULT_PAGE, cursor: str | None = None, **filters: Unpack[Filters]
    ) -> JobPage:
        """One page of the jobs matching ``filters``, newest first: ``JobPage(jobs,
        next_cursor)``; pass ``next_cursor`` back as ``cursor`` for the next page (None:
        no more). Filters: ``status`` (one or several), ``queue``, ``job_type``,
        ``task_name``, ``correlation_id``, ``owner_id``, ``error_type``, ``tenant``,
        ``created_after``/``created_before``, ``finished_after``/``finished_before`` (an
        aware datetime, or a timedelta: that long ago), ``due_after``/``due_before`` (the
        due time of a countdown/eta; a timedelta: that long from now); see ``finder.py``.

        Raises:
            InvalidFilter: a bad filter, ``limit`` (1-1000) or ``cursor``.
        """
        limit = check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        found = self._services.store.find(
            filter_of(filters, self._services.store.clock), after, limit + 1
        )
        return page_of(found, limit)

    def retry_many(
        self,
        *,
        limit: int = bulk.DEFAULT_LIMIT,
        include_unrecoverable: bool = True,
        **filters: Unpack[Filters],
    ) -> BulkReport:
        """``retry`` each job matching ``filters`` (``failed`` ones unless ``status`` names
        failed and/or cancelled), newest first, at most ``limit``: a report of the jobs
        changed and those refused, with why (``bulk.py``). Jobs whose stored arguments
        hold redacted values are refused (retry them one by one with ``arguments=``).
        With ``include_unrecoverable=False`` (the CLI's default), a failure whose error was
        not to be retried (``Unrecoverable``, or not in its task's ``autoretry_for``) is
        left alone and reported as ``skipped``.

        Raises:
            InvalidFilter: a bad filter or limit, or a status that is never retried.
        """
        limit, chosen = check_limit(limit, None), filter_of(filters, self._services.store.clock)
        return bulk.retry_many(
            self, self._services.store.find, chosen, limit, include_unrecoverable
        )

    def cancel_many(
        self,
        *,
        limit: int = bulk.DEFAULT_LIMIT,
        reason: str = "cancelled",
        running: bool = False,
        **filters: Unpack[Filters],
    ) -> BulkReport:
        """``cancel`` each job matching ``filters`` (``pending`` and ``retrying`` ones, and
        ``processing`` ones with ``running=True``), newest first, at most ``limit``: a
        report of the jobs changed (cancelled, or asked to stop) and those refused.

        Raises:
            InvalidFilter: a bad filter or limit, or a status that is never cancelled.
        """
        limit, chosen = check_limit(limit, None), filter_of(filters, self._services.store.clock)
        return bulk.cancel_many(self, self._services.store.find, chosen, limit, reason, running)

    def pipeline(self, correlation_id: str | UUID) -> Pipeline:
        """The jobs sharing ``correlation_id`` (a pipeline: its first job's id), oldest
        first, with their parent links, counts per status and overall ``state``.

        Raises:
            JobNotFound: no job has this correlation id.
        """
        cid = as_job_id(correlation_id, "correlation_id")
        jobs = self._services.store.pipeline(cid)
        if not jobs:
            raise JobNotFound(f"no job with correlation id {cid}")
        return Pipeline(cid, tuple(jobs))

    def run_maintenance(self, name: str, *, now: datetime | None = None) -> Report:
        """One pass of the maintenance plugin ``name`` (``relay``, ``reap``, ``cleanup``):
        what its Beat task ``celery_tracked.<name>`` and ``celery tracked <name>`` run; its
        report (``as_dict()``). ``now``: see the plugin's method below.

        Raises:
            KeyError: no plugin of that name.
            StoreError: the database failed (the next pass starts over).
        """
        plugins = self._services.maintenance
        if name not in plugins:
            raise KeyError(f"no maintenance plugin {name!r}: one of {sorted(plugins)}")
        now = check_now(now)  # InvalidFilter: before the pass, not recorded
        plugin = plugins[name]
        return self._recorded(plugin, lambda: plugin.run(now))

    def relay(self, *, now: datetime | None = None) -> RelayReport:
        """Publish the pending jobs whose producer died before handing their message to the
        broker: one pass of the relay (``services/relay.py``; the task
        ``celery_tracked.relay`` runs it on Beat). ``now``: the time a row's age is judged
        at (default: the database's clock). Raises ``StoreError``: the database failed."""
        now = check_now(now)  # InvalidFilter: before the pass, not recorded
        plugin = self._plugin(Relay)
        return self._recorded(plugin, lambda: plugin.run(now))

    def schedule(self, *, now: datetime | None = None) -> RelayReport:
        """Publish the held jobs coming within ``tracked_schedule_horizon_seconds``: one pass
        of ``services/schedule.py`` (Beat: ``celery_tracked.schedule``). ``now``: the time
        due times are judged at (default: the database's clock). Raises ``StoreError``."""
        now = check_now(now)  # InvalidFilter: before the pass, not recorded
        plugin = self._plugin(Scheduler)
        return self._recorded(plugin, lambda: plugin.run(now))

    def reap(self, *, now: datetime | None = None) -> ReapReport:
        """Rescue (or abandon) the jobs nothing will move any more: one pass of the reaper
        (``services/reaper.py``; the task ``celery_tracked.reap`` runs it on Beat). ``now``
        judges how long ago a job's last sign of life was (default: the database's clock);
        whether a lease lapsed (no live holder) is judged on the database's only. Raises
        ``StoreError``: the database failed (nothing half-done: each move is atomic)."""
        now = check_now(now)  # InvalidFilter: before the pass, not recorded
        plugin = self._plugin(Reaper)
        return self._recorded(plugin, lambda: plugin.run(now))

    def cleanup(
        self,
        *,
        dry_run: bool = False,
        on_batch: Callable[[int], None] | None = None,
        now: datetime | None = None,
    ) -> CleanupReport:
        """Remove the ended jobs past their retention, with their events and guard entries
        (``dry_run``: only count them); see docs/operations.md, "Retention and cleanup".

        Ages: ``tracked_retention_completed_days``, ``tracked_retention_failed_days``
        (failed and cancelled), a task's ``retention=`` (read from the tasks this process
        has imported); ``tracked_retention_keep_newest`` per queue and status. Batches of
        ``tracked_cleanup_batch_size`` rows, one transaction each; ``on_batch(n)`` after
        each. ``now``: the time ages are judged at (default: the database's clock).

        Raises:
            StoreError: the database failed (the batches before it stay removed).
        """
        now = check_now(now)  # InvalidFilter: before the pass, not recorded
        plugin = self._plugin(Cleanup)
        if dry_run:  # no pass: nothing to record
            return plugin.run(now, dry_run=True, on_batch=on_batch)
        return self._recorded(plugin, lambda: plugin.run(now, on_batch=on_batch))

    def _plugin(self, kind: type[M]) -> M:
        plugin = self._services.maintenance[kind.name]
        assert isinstance(plugin, kind), f"{kind.name!r} is a {type(plugin).__name__}"
        return plugin

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per queue: ``counts`` per status, ``total``, ``scheduled`` (pending jobs not due
        yet: a countdown/eta, held ones among them; ready = pending - scheduled),
        ``oldest_pending_age_s`` (of the due ones),
        ``failed_last_hour`` (jobs that ended ``failed`` in the last hour) and
        ``expired_leases`` (``processing`` jobs no live run holds), ``paused`` (the pause
        holding the queue, or None; job types: :meth:`paused`).

        Counts are exact, except on a PostgreSQL table of 1M rows or more, where the
        ``completed``/``failed``/``cancelled`` groups over 100,000 rows (and so ``total``)
        are estimated from a block sample (docs/operations.md, "Statistics")."""
        stats = self._services.store.stats()
        health = self._services.store.queue_health()
        for queue, entry in stats.items():
            entry.update(health.get(queue, {"failed_last_hour": 0, "expired_leases": 0}))
        return self._services.pauses.marked(stats)  # each queue's ``paused``

    def throughput(self, *, window_s: float = WINDOW_S, sample: int = SAMPLE) -> dict[str, Any]:
        """Per queue: the jobs ended in the last ``window_s`` (by status, per minute, per
        bucket) and run-time percentiles, from the newest ``sample`` of them
        (``core/throughput.py``: exact below the sample size, ``sampled`` at it)."""
        return throughput.read(self._services.store, window_s, sample)

    def record_action(self, done: Done) -> int:
        """Write ``done`` (who did what to what: the dashboard's actions) to the action log,
        with an ``action`` event on each job it changed (``services/actions.py``); its id."""
        return actions.record(self._services.store, self.settings.masking, done)

    def actions(self, *, before: int | None = None, limit: int = DEFAULT_PAGE) -> list[Action]:
        """The action log, newest first: the entries with an id below ``before``."""
        return actions.page(self._services.store, before, check_limit(limit))

    @overload
    def wait(self, job_id: EnqueueResult[R], timeout: float = 30.0) -> R: ...

    @overload
    def wait(self, job_id: str | UUID, timeout: float = 30.0) -> Any: ...

    def wait(self, job_id: str | UUID | EnqueueResult[Any], timeout: float = 30.0) -> Any:
        """Block until the job ends; return its result (decoded ``result_json``).

        Given what ``enqueue`` returned, the result is typed as the body's return type.
        Subscribes first, then reads the row, so a transition between the two is never
        missed. No Celery result backend is needed.

        Raises:
            JobNotFound: no job has this id.
            JobFailed: the job ended ``failed`` or ``cancelled``.
            WaitTimeout: it had not ended after ``timeout`` seconds.
        """
        job_id = as_job_id(job_id.job_id if isinstance(job_id, EnqueueResult) else job_id)
        return waiting.wait_for_end(
            self._services.store, self._services.notifier, job_id, timeout, self.REREAD_S
        )

    def close(self) -> None:
        """Stop the lease keeper, dispose of the store's connections, close the guard."""
        self._services.close()
