"""``TrackedTask``: a thin adapter between Celery and the services.

Description: ``TrackedTask.description``, the frozen
:class:`~celery_tracked.description.TaskDescription` every producer path reads (built
once per task class from the options checked when the class was made, ``options.py``,
with Celery's routing and re-publish as its ``route`` and ``send``).

Producer: ``enqueue``/``apply_async`` gather Celery's facts of the call once
(``calls.py``) and hand them, with the description and Celery's ``apply_async`` as the
publish, to the :class:`~celery_tracked.services.producer.Producer`; ``apply`` and eager
mode go through ``eager.py``. A re-publish of an existing job (a Celery retry: the message
already carries the job id) only re-publishes, with ``argsrepr``/``kwargsrepr`` redacted
again.

Worker: ``__call__`` hands the delivery to the :class:`~celery_tracked.runner.Runner`,
inside the task's call path (so a failed durable write becomes a retry, never a silent
success), and turns its verdict into Celery's terms. This is the only place that raises
Celery's ``Ignore``/``Retry``/``Reject``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import partial
from typing import Any, ClassVar, ParamSpec, TypeVar, cast

from celery import Celery, Task
from celery.exceptions import Ignore, TimeLimitExceeded
from celery.result import AsyncResult
from celery.utils.saferepr import saferepr
from sqlalchemy import Connection

from ..core.description import TaskDescription
from ..core.jobs import EnqueueResult
from ..core.keys import KeyRule
from ..core.limits import Limits
from ..core.messages import CONTROL_OPTIONS, Control, TrackedHeaders
from ..core.options import check_task_class, check_task_limits, describe
from ..core.outcomes import Completed, Failed, PassedOn, Postponed, Retrying, Verdict
from ..core.retry_policy import RetryPolicy
from ..core.run import Run
from ..core.settings import Settings
from ..services import pipelines, progress
from ..services.pipelines import Step
from ..services.reports import ProgressReporter
from . import calls, celery_builtins, eager, priorities, retries, transactional, untracked, values
from .beat import install_beat_entries
from .celery_signals import CELERY_SIGNALS
from .celery_tracker import Tracker
from .request_state import attempt_of, body_call, part
from .routing import routed_queue

_HOSTNAME = socket.gethostname()

P = ParamSpec("P")
Q = ParamSpec("Q")
R_co = TypeVar("R_co", covariant=True)

__all__ = ["TrackedTask"]


class TrackedTask(Task[P, R_co]):
    """A Celery task whose every job has a durable row, a guard and a fenced lease;
    generic like Celery's ``Task``: ``TrackedTask[P, R]`` for a body ``Callable[P, R]``.

    Tracked options (class attributes, or keywords of ``tracked_task`` / ``app.task``):
    ``tracked_queue``, ``tracked_priority``, ``job_type``, ``max_attempts``, ``backoff_ms``,
    ``idempotency_key`` (a template naming the call's arguments, or a callable; a key given
    per call is taken literally), ``key_lifetime`` (with ``throttle_s``/``debounce_s``),
    ``validator``, ``rate_limit_global``, ``concurrency_key`` (with ``concurrency_limit``
    and ``fairness_key``), ``retention`` (how long its ended jobs are kept),
    ``retry_semantics`` (``"celery"`` or ``"tracked"``, default the app's
    ``tracked_retry_semantics``: ``"celery"``),
    ``deadline`` (a ``timedelta``/seconds: a job not started that long after its enqueue
    ends ``cancelled``); what each means and accepts: ``celery_tracked/core/options.py``.
    A running body reads its job's own deadline as ``self.job_deadline``.
    """

    acks_late = True
    reject_on_worker_lost = True
    max_retries = None  # attempts are counted by the tracker, not by Celery

    job_type: ClassVar[str | None] = None
    tracked_queue: ClassVar[str | None] = None
    #: its messages' priority (``tracked_task(priority=...)``; Celery's own ``priority``
    #: attribute is read too, but Celery 5.7 deprecates it)
    tracked_priority: ClassVar[int | None] = None
    max_attempts: ClassVar[int | None] = None
    backoff_ms: ClassVar[int | None] = None
    idempotency_key: ClassVar[str | Callable[..., str] | None] = None
    validator: ClassVar[Any] = None
    key_lifetime: ClassVar[str | None] = None
    throttle_s: ClassVar[float | None] = None
    debounce_s: ClassVar[float | None] = None
    retention: ClassVar[Any] = None
    #: a ``timedelta`` or seconds after the enqueue (``deadlines.py``); None: no deadline
    deadline: ClassVar[Any] = None
    #: ``"celery"`` or ``"tracked"``; None: the app's ``tracked_retry_semantics``
    retry_semantics: ClassVar[str | None] = None
    _tracked_retry: ClassVar[RetryPolicy] = RetryPolicy()
    _tracked_keys: ClassVar[KeyRule] = KeyRule()
    rate_limit_global: ClassVar[str | tuple[str, int] | None] = None
    concurrency_key: ClassVar[str | Callable[..., str] | None] = None
    concurrency_limit: ClassVar[int | None] = None
    fairness_key: ClassVar[str | Callable[..., str] | None] = None
    _tracked_limits: ClassVar[Limits] = Limits()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse bad tracked options (``InvalidTaskOption``) when a task class is made
        (``@app.task``/``@tracked_task`` make one with ``type()``)."""
        super().__init_subclass__(**kwargs)
        if not celery_builtins.is_celery_builtin(cls):  # else made plain: __new__
            cls._tracked_retry, cls._tracked_keys = check_task_class(cls, TrackedTask)
            cls._tracked_limits = check_task_limits(cls)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Celery's built-in tasks stay plain Celery tasks (``celery_builtins.py``)."""
        twin = celery_builtins.plain_twin(cls)
        return twin() if twin is not None else super().__new__(cls)

    @classmethod
    def on_bound(cls, app: Celery) -> None:
        """An app with a tracked task gets the default Beat entries (``beat.py``)."""
        super().on_bound(app)
        install_beat_entries(app)

    @property
    def tracker(self) -> Tracker:
        return Tracker.for_app(self.app)

    @property
    def description(self) -> TaskDescription:
        """What every producer path needs of this task (``description.py``), made once
        per task class, when first needed (its name is known then)."""
        cls = type(self)
        found = cls.__dict__.get("_tracked_description")
        if found is None:
            retry = cls._tracked_retry.under(Settings.retry_semantics_from_conf(self.app.conf))
            checked = (retry, cls._tracked_keys, cls._tracked_limits)
            send = partial(calls.send_existing, self)
            framework = (partial(routed_queue, self.app, self.name), send)
            highest = partial(priorities.highest_priority, self.app)
            found = describe(cls, self.name, self.run, framework, checked, saferepr, highest)
            setattr(cls, "_tracked_description", found)  # noqa: B010 (one per task class)
        return cast(TaskDescription, found)

    @property
    def tracked_job_type(self) -> str:
        return self.description.job_type

    # -- producer ---------------------------------------------------------------------

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult[R_co]:
        """Create the job (or find the duplicate) and publish it. The body's arguments;
        control options: ``with_options()`` (or the untyped ``_idempotency_key=``...).

        Raises:
            InvalidPayload: the arguments were refused (nothing was created).
            EnqueueError: Redis, the database or the broker failed (nothing left behind).
        """
        chosen = Control.underscored(kwargs)
        options = chosen.pop("options", None)
        return self._enqueue_with(Control(**chosen), options)(*args, **kwargs)

    def enqueue_in(self, conn: Any, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult[R_co]:
        """``enqueue`` inside the caller's transaction (a SQLAlchemy ``Session`` or
        ``Connection`` to the tracking database): published once it commits, gone if it
        rolls back (``transactional.py``, ``docs/exactly-once.md``)."""
        return transactional.enqueue_in(self, conn, args, dict(kwargs))

    def with_options(
        self,
        *,
        idempotency_key: str | None = None,
        correlation_id: str | None = None,
        parent_job_id: str | None = None,
        owner_id: str | None = None,
        max_attempts: int | None = None,
        options: Mapping[str, Any] | None = None,
        deadline: Any = None,
    ) -> Callable[P, EnqueueResult[R_co]]:
        """``enqueue`` with control options; ``options``: Celery's (``countdown``, ``eta``...);
        ``deadline``: an aware ``datetime``, or a ``timedelta``/seconds after the enqueue."""
        control = Control(
            idempotency_key, correlation_id, parent_job_id, owner_id, max_attempts, deadline
        )
        return self._enqueue_with(control, options)

    def _enqueue_with(
        self, control: Control, options: Mapping[str, Any] | None
    ) -> Callable[P, EnqueueResult[R_co]]:
        """``enqueue`` with ``control`` and Celery's ``options``."""

        def enqueue(*args: P.args, **kwargs: P.kwargs) -> EnqueueResult[R_co]:
            opts = dict(options or {})
            return self._enqueue(args, kwargs, opts.pop("task_id", None), control, opts)[0]

        return enqueue

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: str | None = None,
        **options: Any,
    ) -> AsyncResult[R_co]:
        """Tracked ``apply_async``: also accepts ``idempotency_key``, ``correlation_id``,
        ``parent_job_id``, ``owner_id`` and ``max_attempts``. Returns Celery's ``AsyncResult``
        (its id is the job id), the existing job's for a duplicate (``calls.unsent``)."""
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        options.update(producer=producer, link=link, link_error=link_error, shadow=shadow)
        existing = TrackedHeaders.read(options.get("headers"))
        if existing is not None:
            args, kwargs = values.sent_arguments(self, args, kwargs)
            # a re-publish of an existing job (Celery retry): never a new row or key check
            for name in (*CONTROL_OPTIONS, "_deadline"):
                options.pop(name, None)
            masking = self.tracker.settings.masking
            argsrepr, kwargsrepr = self.description.shape.reprs(args, kwargs, masking)
            options.update(argsrepr=argsrepr, kwargsrepr=kwargsrepr)
            return super().apply_async(args, kwargs, task_id=task_id or existing.job_id, **options)
        control = Control.pop_from(options)
        queued, sent = self._enqueue(args, kwargs, task_id, control, options)
        return sent if sent is not None else calls.unsent(self, queued.job_id, options)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:  # type: ignore[override]
        """Tracked ``apply`` (and eager mode): the row, then the run here (``eager.py``)."""
        if TrackedHeaders.read(options.get("headers")) is not None:
            return eager.deliver(super().apply, args, kwargs, **options)
        control, task_id = Control.pop_from(options), options.pop("task_id", None)
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        run_here = partial(eager.deliver, super().apply)  # its retries inline too
        return self._enqueue(args, kwargs, task_id, control, options, run_here)[1]

    def _enqueue(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        task_id: str | None,
        control: Control,
        options: dict[str, Any],
        run_here: Callable[..., AsyncResult[Any]] | None = None,
    ) -> tuple[EnqueueResult[Any], AsyncResult[Any] | None]:
        """Create the job; publish it, or run it here (``run_here`` given, or eager mode)."""
        args, kwargs = values.sent_arguments(self, args, kwargs)  # pydantic models
        facts = calls.of(task_id, control, options)
        send = calls.Send(run_here or super().apply_async, self.app)
        if run_here is not None or self.app.conf.task_always_eager:
            return eager.enqueue(self.tracker, self.description, facts, args, kwargs, send)
        producer = self.tracker.celery_side.producer
        return producer.enqueue(self.description, facts, args, kwargs, send), send.sent

    # -- pipelines (pipelines.py) -----------------------------------------------------
    def then(self, task: TrackedTask[Q, Any], *args: Q.args, **kwargs: Q.kwargs) -> str:
        """Declare a successor of this running step: created with its completion, published
        after it; returns the successor's job id. Raises ``NotInAStep`` outside a run."""
        return self.successor(task)(*args, **kwargs)

    def otherwise(self, task: TrackedTask[Q, Any], *args: Q.args, **kwargs: Q.kwargs) -> str:
        """Declare a fail-soft successor: created only if this step fails after exhausting
        its retries (never after ``Unrecoverable``)."""
        return self.successor(task, fail_soft=True)(*args, **kwargs)

    def successor(
        self,
        task: TrackedTask[Q, Any],
        *,
        idempotency_key: str | None = None,
        fail_soft: bool = False,
    ) -> Callable[Q, str]:
        """``then``/``otherwise`` with options: ``self.successor(t, idempotency_key=k)(...)``."""

        def declare(*args: Q.args, **kwargs: Q.kwargs) -> str:
            key, soft, step = idempotency_key, fail_soft, part(self.request, Step)
            sent = values.sent_arguments(task, args, kwargs)  # a pydantic task's models
            return pipelines.declare(step, task, *sent, idempotency_key=key, fail_soft=soft)

        return declare

    # -- worker -----------------------------------------------------------------------

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        request = self.request
        if request.called_directly:
            return super().__call__(*args, **kwargs)
        headers = TrackedHeaders.read(request.headers, request)
        if headers is None:
            untracked.warn_run(self.name, request.id)
            return self.run(*args, **kwargs)
        tracker = self.tracker
        settings = tracker.settings
        described = self.description
        shape = described.shape
        run = Run(
            headers=headers,
            task_name=self.name,
            job_type=described.job_type,
            queue=headers.queue or described.queue({}, args, kwargs),
            worker=str(request.hostname or _HOSTNAME),
            backoff_base_ms=described.retry.base_ms(settings.default_backoff_ms),
            secrets=lambda: shape.secrets(args, kwargs, settings.masking),
            inline=bool(request.is_eager),
            policy=described.retry,
            limits=described.limits.for_delivery(shape, args, kwargs, request, settings),
            signals=CELERY_SIGNALS,  # Celery's Ignore/Reject/Retry, read for the core
            stored_result=values.stored_result,  # an AsyncResult as Celery stores it
        )
        body = getattr(self, "_orig_run", self.run)  # Celery's autoretry wrapper bypassed
        call = body_call(request, body, args, kwargs)  # given its attempt by the runner
        return cast(R_co, self._settle(tracker.celery_side.runner.run(run, call)))

    def transaction(self) -> AbstractContextManager[Connection]:
        """The body's transaction on the tracking database, committed with the run's
        completion, rolled back otherwise (``transactional.py``)."""
        return transactional.transaction(self)

    def set_progress(self, percent: float, stage: str | None = None) -> bool:
        """The running job's ``progress`` (0-100) and ``stage``: ``progress.set_progress``."""
        return progress.set_progress(
            part(self.request, ProgressReporter, self.name), percent, stage
        )

    def log(self, message: object, level: str = "info") -> bool:
        """A masked line in the running job's history: ``progress.log``."""
        return progress.log(part(self.request, ProgressReporter, self.name), message, level)

    @property
    def job_deadline(self) -> datetime | None:
        """The running job's deadline (``deadline_at``, UTC; read from its row), None
        without one or outside a run: the time it had to start by."""
        headers = TrackedHeaders.read(self.request.headers, self.request)
        job = None if headers is None else self.tracker.get_job(headers.job_id)
        return None if job is None else job.deadline_at

    def cancelled(self) -> bool:
        """True once this job was asked to stop: ``progress.cancel_requested``."""
        return progress.cancel_requested(part(self.request, ProgressReporter, self.name))

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Celery's, then ``state="PROGRESS"`` feeds ``set_progress()`` (backend first)."""
        try:
            super().update_state(*args, **kwargs)
        finally:
            reporter = part(self.request, ProgressReporter, self.name)
            progress.from_update_state(reporter, self.request.id, *args, **kwargs)

    def _settle(self, verdict: Verdict) -> Any:
        """Turn the runner's verdict into Celery's terms."""
        if isinstance(verdict, Retrying):  # the next attempt
            retries.republish(self, verdict.countdown, verdict.cause)
        if isinstance(verdict, Postponed):  # this delivery again: no attempt was made
            retries.republish(self, verdict.countdown, headers=verdict.headers, attempt=False)
        retries.hide_arguments(self)
        if isinstance(verdict, Completed):
            return verdict.result
        if isinstance(verdict, Failed):
            raise verdict.error
        if isinstance(verdict, PassedOn):
            raise verdict.signal
        raise Ignore()

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: Exception | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        """Celery's ``retry``, with Celery's meaning, for the body's own ``self.retry``
        (``retries.py``; the tracker's re-publishes never come here): it re-publishes while
        the job has an attempt left (and ``max_retries``, if given, is not reached); else
        it raises ``exc`` (or ``MaxRetriesExceededError``) and the job fails with it,
        retries used up. A re-publish the broker refused is handed back
        (``Reject(requeue=True)``), never dropped with attempts left."""
        running = attempt_of(self.request)
        call = dict(args=args, kwargs=kwargs, exc=exc, throw=throw, eta=eta, countdown=countdown)
        with retries.retrying(running):
            return super().retry(**call, max_retries=retries.limit(running, max_retries), **options)

    def on_failure(self, exc: Exception, task_id: str, args: Any, kwargs: Any, _: Any) -> None:
        """Worker main process: a run killed by the hard time limit wrote nothing and its
        message is acknowledged: retry or fail its job (``time_limits.py``)."""
        if isinstance(exc, TimeLimitExceeded):
            republish = partial(retries.publish_again, self, args, kwargs)
            limit = exc.args[0] if exc.args else "?"
            delay = partial(retries.retry_delay, self, killed=exc)
            self.tracker.celery_side.time_limits.time_limited(task_id, limit, delay, republish)
