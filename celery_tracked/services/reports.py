"""The writers behind ``progress.py``: one :class:`ProgressReporter` per running attempt
(attached to it by the :class:`Reports` hook while its body runs), and one
:class:`Flusher` thread per process that writes a progress value the interval held back
once it is due, when the body makes no further call.

Every write is fenced by the run's claim (``store/reports.py``); a write that matches
nothing means the run lost its lease: the reporter then writes nothing more (the
``LeaseKeeper`` stops the run). A database error is logged and swallowed: the next write,
or the completion, carries the newest value. Knows nothing of Celery.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from ..core.attempt import Attempt
from ..core.errors import StoreError
from ..core.hooks import Hooks
from ..core.jobs import Claim, utcnow
from ..core.ports import ReportStore
from ..core.printable import visible
from ..core.run import Run
from ..core.settings import Settings
from . import progress
from .progress import Coalescer, Value

logger = logging.getLogger("celery_tracked")
#: ``self.cancelled()`` reads the job's row at most this often (seconds) per run.
CANCEL_CHECK_S = 1.0
_LEVELS = {name: getattr(logging, name.upper()) for name in progress.LEVELS}


class Flusher:
    """One thread per process writing the held-back values of its runs when due."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[ProgressReporter, float] = {}
        self._pid = 0

    def schedule(self, reporter: ProgressReporter, at: float) -> None:
        """Call ``reporter.flush_due()`` at monotonic time ``at``."""
        with self._cond:
            if self._pid != os.getpid():  # first use in this process (after any fork)
                self._due = {}
                thread = threading.Thread(target=self._loop, name="celery-tracked-progress")
                thread.daemon = True
                thread.start()
                self._pid = os.getpid()
            self._due[reporter] = at
            self._cond.notify()

    def cancel(self, reporter: ProgressReporter) -> None:
        with self._cond:
            self._due.pop(reporter, None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                ready: list[ProgressReporter] = []
                while not ready:
                    now = time.monotonic()
                    ready = [r for r, at in self._due.items() if at <= now]
                    if not ready:
                        soonest = min(self._due.values(), default=None)
                        self._cond.wait(None if soonest is None else soonest - now)
                for reporter in ready:
                    del self._due[reporter]
            for reporter in ready:  # outside the condition: a write takes its time
                try:
                    reporter.flush_due()
                except Exception:  # never lose the thread that serves every run
                    logger.exception("celery-tracked: progress flush failed")


class ProgressReporter:
    """Writes one running attempt's progress and log lines (a ``progress.ProgressSink``)."""

    def __init__(
        self,
        store: ReportStore,
        claim: Claim,
        run: Run,
        settings: Settings,
        flusher: Flusher,
        blocked: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        #: True while the body's own transaction holds SQLite's only write lock: a write
        #: would wait on this very process (``exactly-once.md``)
        self._blocked = blocked
        self._claim = claim
        self._run = run
        self._settings = settings
        self._flusher = flusher
        self._coalescer = Coalescer(settings.progress_interval_ms / 1000)
        self._lock = threading.Lock()
        self._scheduled = False
        self._ended = False
        self._lost = False
        self._lines: int | None = None  # the job's log lines, read at the first one
        self._secrets: Sequence[str] | None = None
        self._cancel_checked: float | None = None  # monotonic time of the last read
        self._cancelled = False

    # -- progress ---------------------------------------------------------------------

    def progress(self, percent: int, stage: str | None) -> None:
        self._advance(lambda now: self._coalescer.offer((percent, stage), now))

    def flush_due(self) -> None:
        """The flusher's call: write the held-back value if it is due."""
        self._advance(self._coalescer.due, flushing=True)

    def _advance(self, take: Callable[[float], Value | None], flushing: bool = False) -> None:
        """Write the value ``take(now)`` gives, if any (under the lock, unless the attempt
        ended or lost its lease; ``flushing``: the scheduled flush is the caller), then
        schedule the flush of a value held back."""
        now = time.monotonic()
        with self._lock:
            if flushing:
                self._scheduled = False
            if self._ended or self._lost:
                return
            value = take(now)
            if value is not None:
                self._write(value, now)
            due = self._next_due()
        if due is not None:
            self._flusher.schedule(self, due)

    def end(self) -> None:
        """The body ended: write the newest value now (before the outcome), then nothing."""
        with self._lock:
            self._ended = True
            value = self._coalescer.pending
            if value is not None and not self._lost:
                self._write(value, time.monotonic())
        self._flusher.cancel(self)

    def _next_due(self) -> float | None:
        """When to flush, if a value is pending and no flush is scheduled yet (lock held)."""
        due = self._coalescer.next_due()
        if due is None or self._scheduled:
            return None
        self._scheduled = True
        return due

    def _write(self, value: Value, now: float) -> None:
        if self._blocked():  # kept pending: a later write carries it
            self._coalescer.sent(value, now, written=False)
            return
        percent, stage = value
        if stage is not None:
            stage = self._mask(stage)[: progress.MAX_STAGE_CHARS]
        try:
            written = self._store.report_progress(
                self._claim, percent=percent, stage=stage, now=utcnow()
            )
        except Exception as exc:  # never into the body: the next write carries the value
            self._coalescer.sent(value, now, written=False)
            unexpected = not isinstance(exc, StoreError)
            job_id = self._claim.job_id
            logger.warning("job %s: progress not written: %s", job_id, exc, exc_info=unexpected)
            return
        self._coalescer.sent(value, now, written)
        if not written:
            self._lease_lost("progress")

    # -- cancel requests ----------------------------------------------------------------

    def cancel_requested(self) -> bool:
        """True once ``Tracker.cancel(job_id, running=True)`` asked this job to stop (or
        it was cancelled); reads the row at most every ``CANCEL_CHECK_S`` seconds, and a
        database error reads as "not asked" (logged)."""
        now = time.monotonic()
        with self._lock:
            if self._cancelled:
                return True
            checked = self._cancel_checked
            if checked is not None and now - checked < CANCEL_CHECK_S:
                return False
            self._cancel_checked = now
        try:
            wanted = self._store.cancel_wanted(self._claim.job_id)
        except StoreError as exc:
            logger.warning("job %s: cancel request not read: %s", self._claim.job_id, exc)
            return False
        with self._lock:
            self._cancelled = self._cancelled or wanted
            return self._cancelled

    # -- log lines --------------------------------------------------------------------

    def log(self, message: str, level: str) -> bool:
        masking = self._settings.masking
        text = progress.log_text(message, level, self._secrets_of(), masking)
        run, claim = self._run, self._claim
        extra: dict[str, object] = {"job_id": claim.job_id, "queue": run.queue}
        extra.update(job_type=run.job_type, status="processing", attempt=claim.attempt)
        # job data: control characters and lone surrogates escaped, as in every line about jobs
        logger.log(_LEVELS[level], "job %s: %s", claim.job_id, visible(text), extra=extra)
        with self._lock:
            if self._lost or self._blocked():  # blocked: the logger has it, not the history
                return False
            limit = self._settings.log_lines_per_job
            try:
                if self._lines is None:
                    self._lines = self._store.log_lines(claim.job_id)
                if self._lines > limit:
                    return False
                line = text if self._lines < limit else progress.dropped_line(limit)
                written = self._store.log_line(claim, message=line, now=utcnow())
            except Exception as exc:  # never into the body
                unexpected = not isinstance(exc, StoreError)
                logger.warning(
                    "job %s: log line not written: %s", claim.job_id, exc, exc_info=unexpected
                )
                return False
            if not written:
                self._lease_lost("log line")
                return False
            self._lines += 1
            return self._lines <= limit

    def _secrets_of(self) -> Sequence[str]:
        if self._secrets is None:
            self._secrets = tuple(self._run.secrets())
        return self._secrets

    def _mask(self, text: str) -> str:
        return self._settings.masking.mask(text, self._secrets_of())

    def _lease_lost(self, what: str) -> None:
        self._lost = True
        logger.warning(
            "job %s attempt %s no longer holds its lease: %s not written, nor any more",
            self._claim.job_id,
            self._claim.attempt,
            what,
        )


class Reports(Hooks):
    """The progress feature: one reporter per running attempt of this process."""

    def __init__(self, store: ReportStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.flusher = Flusher()

    @contextmanager
    def running(self, attempt: Attempt) -> Iterator[ProgressReporter]:
        """Attach the attempt's reporter for its body (``self.set_progress`` and the like
        reach it); when the body ends, the newest progress is written and the reporter
        retired."""

        def blocked() -> bool:
            held = attempt.held
            return held is not None and held.locks_writer

        reporter = ProgressReporter(
            self.store, attempt.claim, attempt.run, self.settings, self.flusher, blocked
        )
        attempt.attach(reporter)
        try:
            yield reporter
        finally:
            reporter.end()
