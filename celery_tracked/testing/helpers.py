"""``TrackedTesting``: what a test asserts on tracked jobs, and how it runs them.

Built on the app's :class:`~celery_tracked.Tracker` (its store holds what was enqueued)
and Celery's own in-process worker (``celery.contrib.testing.worker.start_worker``). No
pytest here: a failed assertion is a plain ``AssertionError`` (pytest shows it as usual).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.contrib.testing import tasks as celery_test_tasks
from celery.contrib.testing.worker import TestWorkController, start_worker
from celery.worker import state as worker_state

from ..adapter.celery_tracker import Tracker
from ..adapter.task import TrackedTask
from ..core.jobs import Job, JobEvent, JobStatus
from ..core.pipelines import Pipeline
from ..core.redact import mask_url

__all__ = ["OPEN", "TrackedTesting"]

#: The statuses of a job that has not ended yet.
OPEN = (JobStatus.PENDING, JobStatus.RETRYING, JobStatus.PROCESSING)
#: The most jobs one read returns (``Tracker.jobs``' page limit).
_PAGE = 1000


class TrackedTesting:
    """Helpers over one tracked test app (the ``tracked`` fixture gives one per test).

    ``app``: the Celery app the tasks are bound to, configured for tracking (the
    ``tracked_app`` fixture). Every method reads the app's tracker; nothing is cached.
    """

    #: how often ``run_enqueued`` re-reads the jobs while it waits
    POLL_S = 0.02

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._worker: Any = None  # the worker ``worker()`` started, while it runs

    @property
    def tracker(self) -> Tracker:
        """The app's tracker (``Tracker.for_app(app)``)."""
        return Tracker.for_app(self.app)

    # -- reads --------------------------------------------------------------------

    def jobs(self, task: Any = None, *, status: Any = None) -> list[Job]:
        """The app's jobs, oldest first; only ``task``'s (a task or its name) and only
        those in ``status`` (a ``JobStatus``, its value, or several) when given."""
        filters: dict[str, Any] = {}
        if task is not None:
            filters["task_name"] = task if isinstance(task, str) else task.name
        if status is not None:
            filters["status"] = status
        return list(reversed(self.tracker.jobs(limit=_PAGE, **filters).jobs))

    def enqueued(self, task: Any = None) -> list[Job]:
        """The jobs not run yet (``pending`` or ``retrying``), oldest first."""
        return self.jobs(task, status=[JobStatus.PENDING, JobStatus.RETRYING])

    def job(self, job_id: Any) -> Job:
        """The job's row (``job_id``: an id, an ``EnqueueResult`` or an ``AsyncResult``).

        Raises:
            AssertionError: no job has this id.
        """
        found = self.tracker.get_job(_id_of(job_id))
        assert found is not None, f"no job {_id_of(job_id)}"
        return found

    def status(self, job_id: Any) -> JobStatus:
        """The job's status now."""
        return self.job(job_id).status

    def events(self, job_id: Any) -> list[str]:
        """The names of the job's events, oldest first (``enqueued``, ``started``...)."""
        return [event.event for event in self.history(job_id)]

    def history(self, job_id: Any) -> list[JobEvent]:
        """The job's events, oldest first."""
        return self.tracker.history(_id_of(job_id))

    def successors(self, job_id: Any) -> list[Job]:
        """The jobs a step created (``self.then``/``self.otherwise``), oldest first."""
        step = self.job(job_id)
        pipeline = self.tracker.pipeline(step.correlation_id or step.id)
        return pipeline.children(step.id)

    def pipeline(self, job_id: Any) -> Pipeline:
        """The pipeline the job belongs to (``Tracker.pipeline`` of its correlation id)."""
        job = self.job(job_id)
        return self.tracker.pipeline(job.correlation_id or job.id)

    # -- assertions ---------------------------------------------------------------

    def assert_enqueued(self, task: Any, **arguments: Any) -> Job:
        """The one job of ``task`` waiting to run whose arguments, by parameter name,
        include ``arguments`` (positional ones matched to the task's parameters); the job.

        Raises:
            AssertionError: no such job, or more than one (the jobs of ``task`` waiting
                are listed).
        """
        waiting = self.enqueued(task)
        matching = [job for job in waiting if _matches(task, job, arguments)]
        shown = [(job.id, _arguments_of(task, job)) for job in waiting]
        assert matching, f"no {task.name} job enqueued with {arguments}; enqueued: {shown}"
        assert len(matching) == 1, f"{len(matching)} {task.name} jobs match {arguments}: {shown}"
        return matching[0]

    def assert_not_enqueued(self, task: Any, **arguments: Any) -> None:
        """No job of ``task`` waiting to run has these arguments (any, when none given)."""
        matching = [job.id for job in self.enqueued(task) if _matches(task, job, arguments)]
        assert not matching, f"{task.name} jobs enqueued with {arguments}: {matching}"

    def assert_status(self, job_id: Any, status: JobStatus | str) -> Job:
        """The job is in ``status``; its row."""
        job = self.job(job_id)
        assert job.status is JobStatus(status), (
            f"job {job.id} ({job.task_name}) is {job.status.value}, not {JobStatus(status).value}"
            f" (error: {job.error_type}: {job.error_message})"
        )
        return job

    # -- running ------------------------------------------------------------------

    def run_enqueued(self, timeout: float = 10.0) -> list[Job]:
        """Run what was enqueued, and what that enqueues, until no job is ``pending``,
        ``retrying`` or ``processing``: on the running ``tracked_worker``, else on an
        in-process worker started for the call. Returns the jobs that ended meanwhile,
        oldest first.

        Raises:
            AssertionError: jobs still open after ``timeout`` seconds (listed), or the
                in-process worker died (its error as the cause).
        """
        before = {job.id for job in self.jobs() if job.status not in OPEN}
        if self._worker is None:
            with self.worker():
                self._drain(timeout)
        else:
            self._drain(timeout)
        return [job for job in self.jobs() if job.id not in before and job.status not in OPEN]

    @contextmanager
    def worker(self, **extra: Any) -> Iterator[Any]:
        """Celery's in-process worker for the app (``start_worker``: a thread, the
        ``solo`` pool, no ping task), stopped on exit; it consumes from every queue the
        app knows of (:meth:`queues`). ``extra`` options go to ``start_worker``."""
        options: dict[str, Any] = {
            "pool": "solo",
            "perform_ping_check": False,
            "WorkController": _RecordingWorker,
        }
        options["queues"] = self.queues()
        options.update(extra)
        reach_broker(self.app)  # Celery's start_worker would retry for minutes
        root = logging.getLogger()
        level, handlers = root.level, list(root.handlers)
        try:
            with start_worker(self.app, **options) as worker:
                self._worker = worker
                try:
                    yield worker
                finally:
                    self._worker = None
                    self._wake_to_stop()
        finally:  # Celery's worker set up logging (root at its level): give the test's back
            root.setLevel(level)
            root.handlers[:] = handlers

    def queues(self) -> list[str]:
        """The queues a test's worker consumes from: the app's default queue and its
        ``task_queues``, the queue each tracked task of the app sends to (routed without
        arguments) and the queue of every job not run yet."""
        names = {str(self.app.conf.task_default_queue), *map(str, self.app.amqp.queues)}
        for task in list(self.app.tasks.values()):
            if isinstance(task, TrackedTask):
                try:
                    names.add(task.description.queue({}, (), {}))
                except (LookupError, TypeError, ValueError):  # a route that needs arguments
                    continue
        names.update(job.queue_name for job in self.jobs(status=list(OPEN)))
        return sorted(names)

    def _wake_to_stop(self) -> None:
        """Ask the worker to stop, then wake it with Celery's ``ping`` task, twice: its
        loop (``synloop``) waits up to 2 s for a message before it looks at the stop
        request, and once more after it saw it."""
        worker_state.should_terminate = 0  # type: ignore[assignment]  # as ``start_worker`` on exit
        for _ in range(2):
            self.app.send_task(celery_test_tasks.ping.name, ignore_result=True)

    def _drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            still = self.jobs(status=list(OPEN))
            if not still:
                return
            died_of = getattr(self._worker, "died_of", None)
            if died_of is not None:
                raise AssertionError(f"the in-process worker died: {died_of!r}") from died_of
            if time.monotonic() >= deadline:
                shown = [(job.id, job.task_name, job.status.value) for job in still]
                raise AssertionError(f"jobs still open after {timeout} s: {shown}")
            time.sleep(self.POLL_S)


class _RecordingWorker(TestWorkController):
    """Celery's test worker, keeping the error that stopped it (``died_of``): Celery only
    logs it ("Unrecoverable error") and stops the worker's thread. A worker that dies
    before it is ready no longer leaves ``start_worker`` waiting for it."""

    died_of: BaseException | None = None

    def start(self) -> None:
        blueprint: Any = self.blueprint
        started = blueprint.start

        def recording(parent: Any) -> None:
            try:
                started(parent)
            except Exception as exc:
                self.died_of = exc
                started_event: Any = getattr(self, "_on_started")  # noqa: B009  # untyped
                started_event.set()  # else ``ensure_started`` waits for good
                raise

        blueprint.start = recording
        super().start()

    def ensure_started(self) -> None:
        """Wait for the worker to be ready, ``READY_S`` at most (Celery's waits for good)."""
        started_event: Any = getattr(self, "_on_started")  # noqa: B009  # untyped
        if not started_event.wait(READY_S):
            raise AssertionError(f"the in-process worker was not ready after {READY_S} s")


#: How long the in-process worker may take to be ready, and the broker to answer.
READY_S = 30


def reach_broker(app: Celery) -> None:
    """Connect to the app's broker once, ``READY_S`` at most.

    Raises:
        AssertionError: it cannot be reached (its URL masked): a test's app wants the
            in-memory broker (docs/testing.md).
    """
    with app.connection_for_write() as connection:
        try:
            connection.ensure_connection(max_retries=1, timeout=READY_S)
        except Exception as exc:
            raise AssertionError(
                f"the test worker cannot reach the broker {mask_url(connection.as_uri())}: "
                f"{exc}; give the test's app the in-memory broker (broker_url='memory://', "
                "docs/testing.md)"
            ) from exc


def _id_of(value: Any) -> str:
    """A job id from an id, an ``EnqueueResult`` (``job_id``) or an ``AsyncResult`` (``id``)."""
    for name in ("job_id", "id"):
        found = getattr(value, name, None)
        if isinstance(found, str):
            return found
    return str(value)


def _arguments_of(task: Any, job: Job) -> dict[str, Any]:
    """The job's stored arguments by parameter name (as stored: redacted values stay so)."""
    payload = job.payload or {}
    args, kwargs = list(payload.get("args", ())), dict(payload.get("kwargs", {}))
    try:
        bound = inspect.signature(task.run).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):  # not the task's signature: show them as stored
        return {"args": args, **kwargs}
    named = dict(bound.arguments)
    for name, parameter in inspect.signature(task.run).parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and name in named:
            named.update(named.pop(name))
    return named


def _matches(task: Any, job: Job, arguments: dict[str, Any]) -> bool:
    stored = _arguments_of(task, job)
    return all(name in stored and stored[name] == value for name, value in arguments.items())
