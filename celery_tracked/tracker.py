"""``Tracker``: one per Celery app, created lazily from ``app.conf``.

It owns the settings, the job store, the guard/notifier and the per-process lease
keeper, and offers the read side: ``get_job``, ``history``, ``wait``, ``stats``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from celery import Celery

from .errors import ConfigurationError, JobFailed, JobNotFound, TrackedError, WaitTimeout, mask_url
from .guard import Guard, MemoryGuard, Notifier, RedisGuard
from .jobs import Job, JobEvent
from .settings import Settings
from .store import Claim, JobStore, utcnow

logger = logging.getLogger("celery_tracked")

_ATTR = "_celery_tracked_tracker"
_create_lock = threading.Lock()


class Tracker:
    """The tracking side of one Celery app. Get it with :meth:`Tracker.for_app`."""

    #: ``wait`` re-reads the row at least this often, whatever the notifications do.
    REREAD_S = 1.0

    def __init__(self, app: Celery, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.store = JobStore(settings.database_url)
        backend: RedisGuard | MemoryGuard
        if settings.memory_guard:
            backend = MemoryGuard(settings.key_prefix)
        else:
            try:
                backend = RedisGuard(settings.redis_url, settings.key_prefix)
            except ValueError as exc:
                raise ConfigurationError(
                    "tracked_redis_url", f"cannot be used: {mask_url(str(exc))}"
                ) from None
        self.backend = backend
        self.guard: Guard = backend
        self.notifier: Notifier = backend
        self.leases = LeaseKeeper(self.store, settings.lease_seconds)

    @classmethod
    def for_app(cls, app: Celery) -> Tracker:
        """The app's tracker, created (and its settings validated) on first use.

        Raises:
            ConfigurationError: a ``tracked_*`` setting is invalid.
        """
        tracker: Tracker | None = app.__dict__.get(_ATTR)
        if tracker is None:
            with _create_lock:
                tracker = app.__dict__.get(_ATTR)
                if tracker is None:
                    tracker = cls(app, Settings.from_conf(app.conf))
                    setattr(app, _ATTR, tracker)
        return tracker

    # -- reads ------------------------------------------------------------------------

    def get_job(self, job_id: str) -> Job | None:
        """The job's row, or None. Raises ``StoreError`` if the database fails."""
        return self.store.get(job_id)

    def history(self, job_id: str) -> list[JobEvent]:
        """The job's events, oldest first."""
        return self.store.events(job_id)

    def cancel(self, job_id: str, reason: str = "cancelled") -> bool:
        """pending | retrying → cancelled; False if the job is in any other status.

        Never interrupts a running job. Its message, when delivered, runs no body.
        """
        cancelled = self.store.cancel(job_id, now=utcnow(), reason=reason)
        if cancelled:
            try:
                self.notifier.publish(job_id, "cancelled")
            except TrackedError as exc:
                logger.warning("job %s: notification not sent: %s", job_id, exc)
        return cancelled

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per queue: ``counts`` per status, ``total`` and ``oldest_pending_age_s``."""
        return self.store.stats()

    def wait(self, job_id: str, timeout: float = 30.0) -> Any:
        """Block until the job ends; return its result (decoded ``result_json``).

        Subscribes first, then reads the row, so a transition between the two is never
        missed. No Celery result backend is needed.

        Raises:
            JobNotFound: no job has this id.
            JobFailed: the job ended ``failed`` or ``cancelled``.
            WaitTimeout: it had not ended after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        subscription = self.notifier.subscribe(job_id)
        try:
            while True:
                job = self.store.get(job_id)
                if job is None:
                    raise JobNotFound(f"no job {job_id}")
                if job.terminal:
                    if job.status.value == "completed":
                        return job.result
                    raise JobFailed(job)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeout(f"job {job_id} still {job.status} after {timeout} s")
                # a notification wakes us at once; the cap re-reads the row in case the
                # notifier lost one (Redis restart), so waiting never depends on it alone
                subscription.wait(min(remaining, self.REREAD_S))
        finally:
            subscription.close()

    def close(self) -> None:
        self.leases.stop()
        self.store.dispose()
        self.backend.close()


class LeaseKeeper:
    """Renews the leases of the attempts running in this process, every third of a lease.

    One daemon thread per process, started on first use (after any fork).
    """

    def __init__(self, store: JobStore, lease_seconds: float) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self._active: dict[str, Claim] = {}
        self._lock = threading.Lock()
        self._pid = 0
        self._stop = threading.Event()

    def lease_until(self) -> Any:
        return utcnow() + timedelta(seconds=self.lease_seconds)

    def is_active(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._active and self._pid == os.getpid()

    @contextmanager
    def holding(self, claim: Claim) -> Iterator[None]:
        self._ensure_thread()
        with self._lock:
            self._active[claim.job_id] = claim
        try:
            yield
        finally:
            with self._lock:
                if self._active.get(claim.job_id) is claim:
                    del self._active[claim.job_id]

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._active = {}
            self._stop = threading.Event()
            thread = threading.Thread(target=self._run, name="celery-tracked-leases", daemon=True)
            thread.start()
            self._pid = os.getpid()

    def _run(self) -> None:
        interval = self.lease_seconds / 3
        stop = self._stop
        while not stop.wait(interval):
            with self._lock:
                claims = list(self._active.values())
            if not claims:
                continue
            try:
                self.store.renew(claims, self.lease_until())
            except Exception as exc:  # keep renewing; a lapsed lease only allows a takeover
                logger.warning("could not renew %d lease(s): %s", len(claims), exc)

    def stop(self) -> None:
        self._stop.set()
