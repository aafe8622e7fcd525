"""``TrackedTask`` and ``tracked_task``: the producer side and the worker side.

Producer (``apply_async``, which Celery also calls for retries inside the worker):
validate → idempotency key → guard (Redis ``SET NX``) → insert the pending row → publish
with task id = job id. A re-publish (a retry: the message already carries the job id
header) only re-publishes, with ``argsrepr``/``kwargsrepr`` redacted again.

Worker (``__call__``, inside the task's call path so a failed durable write becomes a
retry, never a silent success): claim the row with a fenced lease → run the body →
write the outcome, fenced by the claimed attempt. The task class holds no SQL text.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import random
import socket
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, ClassVar, NoReturn, TypeVar, cast, overload

from celery import Celery, Task, current_task, shared_task
from celery.exceptions import Ignore, Reject, Retry
from celery.result import AsyncResult
from celery.signals import task_revoked, worker_init
from celery.utils.saferepr import saferepr

from .errors import (
    ConfigurationError,
    EnqueueError,
    InvalidPayload,
    StoreError,
    TrackedError,
    Unrecoverable,
    error_type,
    mask_secrets,
    mask_url,
    summarize,
)
from .guard import GuardError
from .jobs import EnqueueResult, JobStatus
from .redact import REDACTED, dumps, encode_payload, is_secret_key, redact, secret_values
from .store import Claim, DuplicateJob, Joiner, utcnow
from .tracker import Tracker

logger = logging.getLogger("celery_tracked")

#: Message headers carried by every tracked message (they survive Celery retries).
HEADER_JOB_ID = "tracked_job_id"
HEADER_CORRELATION_ID = "tracked_correlation_id"
HEADER_PARENT_JOB_ID = "tracked_parent_job_id"
HEADER_QUEUE = "tracked_queue"
#: A failure decided by an attempt whose write failed: the next delivery records it and
#: runs no body.
HEADER_OUTCOME = "tracked_pending_failure"

#: Control options ``apply_async`` accepts besides Celery's own.
CONTROL_OPTIONS = ("idempotency_key", "correlation_id", "parent_job_id", "owner_id", "max_attempts")

#: How long a producer that lost the guard race waits for the winner's row.
_DUPLICATE_WAIT_S = 5.0
#: The job-id guard of a job without idempotency key only covers the enqueue itself.
_ID_GUARD_TTL_MS = 60_000
_HOSTNAME = socket.gethostname()
#: Celery's retry counter is not ours: postponements and re-publishes never exhaust it.
_UNLIMITED = sys.maxsize

F = TypeVar("F", bound=Callable[..., Any])


def _pid_namespace() -> str:
    """This process's PID namespace: processes of containers sharing a hostname differ."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "-"


_HOST_ID = f"{_HOSTNAME}:{_pid_namespace()}"


def _owner() -> str:
    """``locked_by`` of this process: host, PID namespace, pid."""
    return f"{_HOST_ID}:{os.getpid()}"


def backoff_ms(attempt: int, base_ms: int, cap_ms: int, rand: Callable[[], float]) -> int:
    """Delay before the attempt after ``attempt``: ``base * 2**(attempt-1)`` plus up to
    25 % jitter, capped at ``cap_ms``. Never below ``base_ms`` (unless the cap is)."""
    exponential = base_ms * (2 ** max(0, attempt - 1))
    return int(min(cap_ms, exponential * (1 + 0.25 * rand())))


@dataclass(frozen=True)
class _Prepared:
    """A validated call, ready to insert and publish."""

    job_id: str
    key: str | None
    payload_json: str
    argsrepr: str
    kwargsrepr: str
    secrets: list[str]


@dataclass(frozen=True)
class _Skip:
    reason: str


@dataclass(frozen=True)
class _Busy:
    countdown: float
    reason: str


class TrackedTask(Task[Any, Any]):
    """A Celery task whose every job has a durable row, a guard and a fenced lease.

    Options (class attributes, or keywords of ``tracked_task`` / ``app.task``):
        tracked_queue: the queue jobs are sent to unless the call names one
            (``tracked_task(queue=...)`` sets it; ``task_routes`` work as usual).
        job_type: logical type, default the task name; idempotency keys are unique per type.
        max_attempts: attempts before ``failed`` (default ``tracked_default_attempts``).
        backoff_ms: base of the exponential backoff (default ``tracked_default_backoff_ms``).
        idempotency_key: a ``str.format`` template over the call's arguments
            (``"ocr:{document_id}"``) or a callable taking the call's arguments.
        validator: a pydantic model class (validated against the named arguments) or a
            callable taking the named arguments that raises to refuse them.
    """

    acks_late = True
    reject_on_worker_lost = True
    max_retries = None  # attempts are counted by the tracker, not by Celery

    job_type: ClassVar[str | None] = None
    tracked_queue: ClassVar[str | None] = None
    max_attempts: ClassVar[int | None] = None
    backoff_ms: ClassVar[int | None] = None
    idempotency_key: ClassVar[str | Callable[..., str] | None] = None
    validator: ClassVar[Any] = None

    # -- helpers ----------------------------------------------------------------------

    @property
    def tracker(self) -> Tracker:
        return Tracker.for_app(self.app)

    def _static(self, name: str) -> Any:
        value = inspect.getattr_static(type(self), name, None)
        return value.__func__ if isinstance(value, staticmethod | classmethod) else value

    @property
    def tracked_job_type(self) -> str:
        return str(self._static("job_type") or self.name)

    def _queue_name(self, options: Mapping[str, Any], args: Any, kwargs: Any) -> str:
        queue = options.get("queue") or self._static("tracked_queue") or self._static("queue")
        if queue is None and self.app.conf.task_routes:
            queue = self.app.amqp.router.route({}, self.name, args, kwargs).get("queue")
        if queue is None:
            return str(self.app.conf.task_default_queue)
        return str(getattr(queue, "name", queue))

    def _signature(self) -> inspect.Signature | None:
        """The body's signature, computed once per task class."""
        cls = type(self)
        cached = cls.__dict__.get("_tracked_signature", False)
        if cached is False:
            try:
                cached = inspect.signature(self.run)
            except (TypeError, ValueError):
                cached = None
            setattr(cls, "_tracked_signature", cached)  # noqa: B010 (one cache per task class)
        return cast("inspect.Signature | None", cached)

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name (defaults applied)."""
        signature = self._signature()
        if signature is None:
            return dict(kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidPayload(f"{self.name}: {exc}") from None
        bound.apply_defaults()
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return named

    def _positional_names(self, count: int) -> list[str | None]:
        signature = self._signature()
        if signature is None:
            return [None] * count
        params = list(signature.parameters.values())
        positional = [
            p.name
            for p in params
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        return [positional[i] if i < len(positional) else None for i in range(count)]

    def _redacted(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], Any]:
        keys = self.tracker.settings.redact_keys
        names = self._positional_names(len(args))
        safe_args = [
            REDACTED if is_secret_key(name, keys) else redact(value, keys)
            for name, value in zip(names, args, strict=True)
        ]
        return safe_args, redact(dict(kwargs), keys)

    def _reprs(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]:
        safe_args, safe_kwargs = self._redacted(args, kwargs)
        return saferepr(tuple(safe_args), 1024), saferepr(safe_kwargs, 1024)

    def _validate(self, named: dict[str, Any]) -> None:
        validator = self._static("validator")
        if validator is None:
            return
        try:
            if hasattr(validator, "model_validate"):
                validator.model_validate(named)
            else:
                validator(**named)
        except InvalidPayload:
            raise
        except Exception as exc:
            keys = self.tracker.settings.redact_keys
            detail = summarize(exc, secret_values(named, keys), keys)
            raise InvalidPayload(f"{self.name}: invalid arguments: {detail}") from None

    def _key(
        self, explicit: Any, args: Sequence[Any], kwargs: Mapping[str, Any], named: Any
    ) -> str | None:
        template = explicit if explicit is not None else self._static("idempotency_key")
        if template is None:
            return None
        try:
            key = template(*args, **kwargs) if callable(template) else str(template).format(**named)
        except Exception as exc:  # a key template or callable that cannot use these arguments
            raise InvalidPayload(
                f"{self.name}: cannot build the idempotency key from the arguments: {exc!r}"
            ) from None
        if not isinstance(key, str) or not key or len(key) > 255:
            raise InvalidPayload(f"{self.name}: the idempotency key must be 1-255 characters")
        return key

    def _prepare(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], task_id: str | None, key: Any
    ) -> _Prepared:
        settings = self.tracker.settings
        named = self._bind(args, kwargs)
        encode_payload(args, kwargs, settings.max_payload_bytes)
        self._validate(named)
        safe_args, safe_kwargs = self._redacted(args, kwargs)
        return _Prepared(
            job_id=str(task_id or uuid.uuid4()),
            key=self._key(key, args, kwargs, named),
            payload_json=dumps({"args": safe_args, "kwargs": safe_kwargs}),
            argsrepr=saferepr(tuple(safe_args), 1024),
            kwargsrepr=saferepr(safe_kwargs, 1024),
            secrets=secret_values(named, settings.redact_keys),
        )

    # -- producer ---------------------------------------------------------------------

    def enqueue(
        self,
        *args: Any,
        _idempotency_key: str | None = None,
        _correlation_id: str | None = None,
        _parent_job_id: str | None = None,
        _owner_id: str | None = None,
        _max_attempts: int | None = None,
        _options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> EnqueueResult:
        """Create the job (or find the duplicate) and publish it.

        Task arguments are passed as they are; control options have a leading underscore;
        ``_options`` passes Celery options (``countdown``, ``eta``, ``queue``, ``priority``...).

        Raises:
            InvalidPayload: the arguments were refused (nothing was created).
            EnqueueError: Redis, the database or the broker failed (nothing left behind).
        """
        control = {
            "idempotency_key": _idempotency_key,
            "correlation_id": _correlation_id,
            "parent_job_id": _parent_job_id,
            "owner_id": _owner_id,
            "max_attempts": _max_attempts,
        }
        options = dict(_options or {})
        task_id = options.pop("task_id", None)
        return self._enqueue(args, kwargs, task_id, control, options)[0]

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
    ) -> AsyncResult[Any]:
        """Tracked ``apply_async``: also accepts ``idempotency_key``, ``correlation_id``,
        ``parent_job_id``, ``owner_id`` and ``max_attempts``. Returns the job's
        ``AsyncResult`` (its id is the job id), the existing job's for a duplicate."""
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        control = {name: options.pop(name, None) for name in CONTROL_OPTIONS}
        headers = options.get("headers") or {}
        if headers.get(HEADER_JOB_ID):
            # a re-publish of an existing job (Celery retry): never a new row or key check
            argsrepr, kwargsrepr = self._reprs(args, kwargs)
            options.update(argsrepr=argsrepr, kwargsrepr=kwargsrepr)
            return super().apply_async(
                args,
                kwargs,
                task_id=headers[HEADER_JOB_ID],
                producer=producer,
                link=link,
                link_error=link_error,
                shadow=shadow,
                **options,
            )
        options.update(producer=producer, link=link, link_error=link_error, shadow=shadow)
        result = self._enqueue(args, kwargs, task_id, control, options)
        return self.AsyncResult(result[0].job_id)

    def _enqueue(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        task_id: str | None,
        control: Mapping[str, Any],
        options: dict[str, Any],
    ) -> tuple[EnqueueResult, AsyncResult[Any] | None]:
        tracker = self.tracker
        settings = tracker.settings
        _check_control(control, task_id)
        prepared = self._prepare(args, kwargs, task_id, control.get("idempotency_key"))
        max_attempts = _positive(control.get("max_attempts"), "max_attempts") or int(
            self._static("max_attempts") or settings.default_attempts
        )
        job_type = self.tracked_job_type
        queue = self._queue_name(options, args, kwargs)
        if "queue" not in options and self._static("tracked_queue"):
            options["queue"] = queue
        parent_job_id, correlation_id = self._lineage(control, prepared.job_id)
        log_extra = {
            "queue": queue,
            "job_type": job_type,
            "job_id": prepared.job_id,
            "attempt": 0,
            "duration_ms": None,
        }

        guard = tracker.guard
        if prepared.key is not None:
            guard_key = tracker.backend.key("guard", job_type, prepared.key)
            ttl_ms = settings.guard_ttl_seconds * 1000
        else:
            guard_key = tracker.backend.key("guard", "id", prepared.job_id)
            ttl_ms = min(_ID_GUARD_TTL_MS, settings.guard_ttl_seconds * 1000)

        def fail(stage: str, exc: BaseException) -> EnqueueError:
            detail = mask_secrets(str(exc), prepared.secrets, settings.redact_keys)
            logger.error(
                "enqueue of %s failed at %s: %s",
                self.name,
                stage,
                detail,
                extra={**log_extra, "status": "error"},
            )
            return EnqueueError(f"enqueue of {self.name} failed ({stage}): {detail}")

        try:
            holder = self._acquire_guard(guard, guard_key, prepared.job_id, ttl_ms)
        except GuardError as exc:
            raise fail("idempotency guard", exc) from None
        except StoreError as exc:
            raise fail("database", exc) from None
        if holder is not None:
            return self._duplicate(holder, job_type, prepared, log_extra), None

        now = utcnow()
        row = {
            "id": prepared.job_id,
            "queue_name": queue,
            "job_type": job_type,
            "task_name": self.name,
            "celery_task_id": prepared.job_id,
            "status": JobStatus.PENDING.value,
            "payload_json": prepared.payload_json,
            "max_attempts": max_attempts,
            "idempotency_key": prepared.key,
            "correlation_id": correlation_id,
            "parent_job_id": parent_job_id,
            "owner_id": None if control.get("owner_id") is None else str(control["owner_id"]),
            "created_at": now,
            "updated_at": now,
        }
        try:
            tracker.store.insert(row)
        except DuplicateJob:
            self._release(guard, guard_key, prepared.job_id)
            return self._duplicate(None, job_type, prepared, log_extra), None
        except StoreError as exc:
            self._release(guard, guard_key, prepared.job_id)
            raise fail("database", exc) from None

        headers = dict(options.pop("headers", None) or {})
        headers.update(
            {
                HEADER_JOB_ID: prepared.job_id,
                HEADER_CORRELATION_ID: correlation_id,
                HEADER_PARENT_JOB_ID: parent_job_id,
                HEADER_QUEUE: queue,
            }
        )
        try:
            publish: Callable[..., AsyncResult[Any]] = super().apply_async
            async_result = publish(
                tuple(args),
                dict(kwargs),
                task_id=prepared.job_id,
                headers=headers,
                argsrepr=prepared.argsrepr,
                kwargsrepr=prepared.kwargsrepr,
                **options,
            )
        except Exception as exc:
            self._undo(prepared.job_id, guard, guard_key)
            raise fail("broker publish", exc) from None
        logger.info(
            "job %s enqueued on %s",
            prepared.job_id,
            queue,
            extra={**log_extra, "status": "pending"},
        )
        return EnqueueResult(prepared.job_id, JobStatus.PENDING, True), async_result

    def _lineage(self, control: Mapping[str, Any], job_id: str) -> tuple[str | None, str]:
        parent = control.get("parent_job_id")
        correlation = control.get("correlation_id")
        caller = current_task if current_task else None  # a proxy: falsy when no task runs
        if caller is not None and not caller.request.called_directly:
            caller_headers = caller.request.headers or {}
            caller_job = caller_headers.get(HEADER_JOB_ID) or getattr(
                caller.request, HEADER_JOB_ID, None
            )
            if caller_job and parent is None:
                parent = caller_job
            if caller_job and correlation is None:
                correlation = caller_headers.get(HEADER_CORRELATION_ID) or getattr(
                    caller.request, HEADER_CORRELATION_ID, None
                )
        return (
            None if parent is None else str(parent),
            str(correlation) if correlation is not None else job_id,
        )

    def _acquire_guard(self, guard: Any, key: str, token: str, ttl_ms: int) -> str | None:
        """None when this producer holds the key; else the job id of the holder."""
        deadline = time.monotonic() + _DUPLICATE_WAIT_S
        while True:
            holder: str | None = guard.acquire(key, token, ttl_ms)
            if holder is None or holder == token:
                return None
            if self.tracker.store.get(holder) is not None:
                return holder
            # the holder has not committed its row yet, or it died before doing so
            if time.monotonic() >= deadline:
                guard.release(key, holder)  # a stale token: only that exact one is removed
                deadline = time.monotonic() + _DUPLICATE_WAIT_S
                continue
            time.sleep(0.01)

    def _duplicate(
        self, holder: str | None, job_type: str, prepared: _Prepared, log_extra: dict[str, Any]
    ) -> EnqueueResult:
        store = self.tracker.store
        try:
            job = store.get(holder) if holder else None
            if job is None and prepared.key is not None:
                job = store.find_by_key(job_type, prepared.key)
            if job is None:
                job = store.get(prepared.job_id)
        except StoreError as exc:
            raise EnqueueError(f"enqueue of {self.name} failed (database): {exc}") from None
        if job is None:
            raise EnqueueError(f"enqueue of {self.name}: duplicate key but no job found; retry")
        logger.info(
            "job %s deduplicated (key already used)",
            job.id,
            extra={**log_extra, "job_id": job.id, "status": job.status.value, "attempt": 0},
        )
        return EnqueueResult(job.id, job.status, False)

    def _release(self, guard: Any, key: str, token: str) -> None:
        try:
            guard.release(key, token)
        except GuardError as exc:
            logger.warning("could not release guard key: %s (it expires by itself)", exc)

    def _undo(self, job_id: str, guard: Any, key: str) -> None:
        try:
            self.tracker.store.delete(job_id)
        except StoreError as exc:
            # the row stays: keep the guard too, so the key keeps pointing at that row
            logger.error("could not delete the row of unpublished job %s: %s", job_id, exc)
            return
        self._release(guard, key, job_id)

    # -- worker -----------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.called_directly:
            return super().__call__(*args, **kwargs)
        headers = request.headers or {}
        job_id = headers.get(HEADER_JOB_ID) or getattr(request, HEADER_JOB_ID, None)
        if not job_id:
            logger.warning(
                "%s[%s] was not sent through celery-tracked: untracked run", self.name, request.id
            )
            return self.run(*args, **kwargs)
        return self._run_tracked(str(job_id), args, kwargs, headers)

    def _run_tracked(
        self, job_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], headers: Mapping[str, Any]
    ) -> Any:
        tracker = self.tracker
        settings = tracker.settings
        extra: dict[str, Any] = {
            "queue": headers.get(HEADER_QUEUE) or self._queue_name({}, args, kwargs),
            "job_type": self.tracked_job_type,
            "job_id": job_id,
            "attempt": None,
            "duration_ms": None,
        }
        pending_failure = headers.get(HEADER_OUTCOME)
        if pending_failure:
            self._record_pending_failure(job_id, str(pending_failure), extra)
        try:
            claim = self._claim(job_id)
        except StoreError as exc:
            countdown = max(
                0.5, backoff_ms(1, settings.default_backoff_ms, 30_000, random.random) / 1000
            )
            logger.warning(
                "job %s not started, database unavailable: %s; retry in %.1f s",
                job_id,
                exc,
                countdown,
                extra={**extra, "status": "error"},
            )
            self._retry_later(countdown)
        if isinstance(claim, _Skip):
            logger.info(
                "job %s delivery skipped: %s",
                job_id,
                claim.reason,
                extra={**extra, "status": "skipped"},
            )
            raise Ignore()
        if isinstance(claim, _Busy):
            logger.info(
                "job %s delivery postponed %.1f s: %s",
                job_id,
                claim.countdown,
                claim.reason,
                extra={**extra, "status": "busy"},
            )
            self._retry_later(claim.countdown)

        extra["attempt"] = claim.attempt
        logger.info(
            "job %s processing (attempt %d/%d)",
            job_id,
            claim.attempt,
            claim.max_attempts,
            extra={**extra, "status": "processing"},
        )
        # registered from the claim until the outcome is written: a duplicate delivery in
        # this same process never mistakes the running attempt for an abandoned one
        with tracker.leases.holding(claim):
            return self._execute(claim, args, kwargs, extra)

    def _execute(
        self, claim: Claim, args: tuple[Any, ...], kwargs: dict[str, Any], extra: dict[str, Any]
    ) -> Any:
        tracker = self.tracker
        keys = tracker.settings.redact_keys
        started = time.monotonic()
        try:
            result = self.run(*args, **kwargs)
            result_json = _encode_result(result)
        except Ignore:
            # the body handed its work over (``self.replace``) or dropped it on purpose
            self._save_completion(claim, None, None, started, extra, "ignored or replaced")
            raise
        except Reject as reject:
            if getattr(reject, "requeue", False):
                self._abandon(claim)  # the message comes back and takes over at once
            else:
                self._record_failure(
                    claim, reject, started, extra, self._secrets(args, kwargs), None
                )
            raise
        except Retry as retry:
            # the body asked for a retry itself (self.retry / autoretry_for); the message is
            # already re-published: with no attempt left it will find the job failed
            secrets = self._secrets(args, kwargs)
            cause = retry.exc if isinstance(retry.exc, BaseException) else retry
            _mask_exception(cause, secrets, keys)
            # Celery kept a text copy of the cause when it built the Retry: mask it too
            for attr in ("excs", "message"):
                text = getattr(retry, attr, None)
                if isinstance(text, str):
                    setattr(retry, attr, mask_secrets(text, secrets, keys))
            exhausted = claim.attempt >= claim.max_attempts
            delay = None if exhausted else _retry_delay_ms(retry)
            self._record_failure(claim, cause, started, extra, secrets, delay)
            raise
        except Exception as exc:
            secrets = self._secrets(args, kwargs)
            _mask_exception(exc, secrets, keys)
            final = isinstance(exc, Unrecoverable) or claim.attempt >= claim.max_attempts
            next_delay = None if final else self._backoff(claim.attempt)
            self._record_failure(claim, exc, started, extra, secrets, next_delay)
            if next_delay is None:
                raise
            self._retry_later(next_delay / 1000, exc)
        self._save_completion(claim, result, result_json, started, extra, None)
        return result

    def _save_completion(
        self,
        claim: Claim,
        result: Any,
        result_json: str | None,
        started: float,
        extra: dict[str, Any],
        note: str | None,
    ) -> None:
        """Write ``completed``, durably, or make the delivery retry: never acknowledged as
        done without the write."""
        duration = int((time.monotonic() - started) * 1000)
        try:
            saved = self.tracker.store.complete(
                claim,
                result_json=result_json,
                now=utcnow(),
                duration_ms=duration,
                join=self.completion_joiners(claim, result),
            )
        except StoreError as exc:
            delay = self._backoff(claim.attempt)
            self._record_failure(claim, exc, started, extra, [], delay)
            self._retry_later(delay / 1000)
        if not saved:
            self._lost(claim, "completed", {**extra, "duration_ms": duration})
        self._notify(claim.job_id, JobStatus.COMPLETED)
        logger.info(
            "job %s completed in %d ms%s",
            claim.job_id,
            duration,
            f" ({note})" if note else "",
            extra={**extra, "status": "completed", "duration_ms": duration},
        )

    def _retry_later(
        self,
        countdown: float,
        exc: Exception | None = None,
        extra_headers: Mapping[str, Any] | None = None,
    ) -> NoReturn:
        """Re-publish this delivery (same task id and headers) after ``countdown`` seconds.

        Celery's own retry limit never applies (attempts are the tracker's). If the broker
        refuses the re-publish, Celery would drop the message: put it back instead.
        """
        options: dict[str, Any] = {}
        if extra_headers:
            options["headers"] = {**(self.request.headers or {}), **extra_headers}
        try:
            raise self.retry(exc=exc, countdown=countdown, max_retries=_UNLIMITED, **options)
        except Reject as reject:
            raise Reject(getattr(reject, "reason", None), requeue=True) from None

    def _record_pending_failure(self, job_id: str, decided: str, extra: dict[str, Any]) -> NoReturn:
        """Write the failure an earlier attempt decided but could not save; no body runs."""
        outcome = json.loads(decided)
        attempt = int(outcome["attempt"])
        try:
            written = self.tracker.store.fail(
                Claim(job_id, attempt, attempt),
                error_type=str(outcome["error_type"]),
                error_message=str(outcome["error_message"]),
                duration_ms=None,
                now=utcnow(),
            )
        except StoreError as exc:
            logger.warning("job %s: failure still not recorded: %s", job_id, exc)
            self._retry_later(max(0.5, self._backoff(1) / 1000))
        if written:
            self._notify(job_id, JobStatus.FAILED)
            logger.error(
                "job %s failed after attempt %d: %s: %s (recorded late)",
                job_id,
                attempt,
                outcome["error_type"],
                outcome["error_message"],
                extra={**extra, "status": "failed", "attempt": attempt},
            )
        raise Ignore()

    def _lost(self, claim: Claim, outcome: str, extra: dict[str, Any]) -> NoReturn:
        """The fenced write matched nothing: another attempt took over, or (after a database
        crash lost the claim) the row is claimable again and this delivery must retry."""
        try:
            job = self.tracker.store.get(claim.job_id)
        except StoreError:
            self._retry_later(1.0)  # cannot tell: deliver again, the claim will decide
        logger.warning(
            "job %s attempt %d no longer holds its lease; %s not written (now %s)",
            claim.job_id,
            claim.attempt,
            outcome,
            job.status.value if job else "missing",
            extra={**extra, "status": "lease_lost"},
        )
        if job is not None and job.status in (JobStatus.PENDING, JobStatus.RETRYING):
            self._retry_later(0.5)
        raise Ignore()

    def completion_joiners(self, claim: Claim, result: Any) -> Sequence[Joiner]:
        """Hook: callables run inside the completion transaction (no-op by default).

        Rows they write exist if and only if the job is marked completed.
        """
        return ()

    def _secrets(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[str]:
        keys = self.tracker.settings.redact_keys
        named = dict(kwargs)
        for name, value in zip(self._positional_names(len(args)), args, strict=True):
            if name is not None:
                named[name] = value
        return secret_values(named, keys)

    def _backoff(self, attempt: int) -> int:
        settings = self.tracker.settings
        configured = self._static("backoff_ms")
        base = settings.default_backoff_ms if configured is None else int(configured)
        return backoff_ms(attempt, base, settings.max_backoff_ms, random.random)

    def _claim(self, job_id: str) -> Claim | _Skip | _Busy:
        tracker = self.tracker
        store = tracker.store
        now = utcnow()
        until = tracker.leases.lease_until()
        worker = str(self.request.hostname or _HOSTNAME)
        claim = store.claim(job_id, owner=_owner(), worker=worker, now=now, until=until)
        if claim is not None:
            return claim
        job = store.get(job_id)
        if job is None:
            return _Skip("no such job (its enqueue was undone, or the row was deleted)")
        if job.terminal:
            return _Skip(f"job already {job.status.value}")
        if job.status is not JobStatus.PROCESSING:
            return _Busy(0.2, "claimed concurrently")
        stale = self._stale_owner(job_id, job.locked_by)
        expired = job.locked_until is None or job.locked_until <= now
        if not (expired or stale):
            remaining = (job.locked_until - now).total_seconds() if job.locked_until else 0.0
            return _Busy(
                min(max(remaining + 0.1, 0.2), tracker.settings.lease_seconds),
                f"attempt {job.attempts_made} is running elsewhere",
            )
        why = "its worker process died" if stale else "its lease expired"
        if job.attempts_made >= job.max_attempts:
            message = f"attempt {job.attempts_made} was lost ({why}) and no attempts remain"
            if store.fail_lost(
                job_id, seen_attempt=job.attempts_made, now=now, stale_owner=stale, message=message
            ):
                self._notify(job_id, JobStatus.FAILED)
                logger.error(
                    "job %s failed: %s",
                    job_id,
                    message,
                    extra={
                        "queue": job.queue_name,
                        "job_type": job.job_type,
                        "job_id": job_id,
                        "status": "failed",
                        "attempt": job.attempts_made,
                        "duration_ms": None,
                    },
                )
            return _Skip(message)
        taken = store.take_over(
            job_id,
            seen_attempt=job.attempts_made,
            owner=_owner(),
            worker=worker,
            now=now,
            until=until,
            stale_owner=stale,
            reason=f"attempt {job.attempts_made} lost ({why}); "
            f"attempt {job.attempts_made + 1} takes over",
        )
        return taken if taken is not None else _Busy(0.2, "taken over concurrently")

    def _stale_owner(self, job_id: str, locked_by: str | None) -> str | None:
        """``locked_by`` when it names a process of this host that no longer runs the job."""
        if not locked_by:
            return None
        host, _, pid_text = locked_by.rpartition(":")
        if host != _HOST_ID or not pid_text.isdigit():
            return None
        pid = int(pid_text)
        if pid == os.getpid():
            return None if self.tracker.leases.is_active(job_id) else locked_by
        return None if _process_alive(pid) else locked_by

    def _record_failure(
        self,
        claim: Claim,
        exc: BaseException,
        started: float,
        extra: dict[str, Any],
        secrets: Sequence[str],
        delay_ms: int | None,
    ) -> None:
        """Write retrying (``delay_ms`` given) or failed, fenced; log it."""
        tracker = self.tracker
        keys = tracker.settings.redact_keys
        kind = error_type(exc)
        summary = summarize(exc, secrets, keys)
        duration = int((time.monotonic() - started) * 1000)
        now = utcnow()
        status = JobStatus.FAILED if delay_ms is None else JobStatus.RETRYING
        try:
            if delay_ms is None:
                written = tracker.store.fail(
                    claim, error_type=kind, error_message=summary, duration_ms=duration, now=now
                )
            else:
                written = tracker.store.retrying(
                    claim,
                    error_type=kind,
                    error_message=summary,
                    delay_ms=delay_ms,
                    duration_ms=duration,
                    now=now,
                )
        except StoreError as store_exc:
            logger.error(
                "job %s: could not record %s: %s",
                claim.job_id,
                status.value,
                store_exc,
                extra={**extra, "status": "error", "duration_ms": duration},
            )
            if delay_ms is None:
                # the decision must not be lost, nor the body run again: the re-published
                # message carries it, and its delivery records it once the database answers
                decided = {"attempt": claim.attempt, "error_type": kind, "error_message": summary}
                self._retry_later(1.0, extra_headers={HEADER_OUTCOME: json.dumps(decided)})
            return
        if not written:
            self._lost(claim, status.value, {**extra, "duration_ms": duration})
        if status is JobStatus.FAILED:
            self._notify(claim.job_id, status)
        level = logging.ERROR if status is JobStatus.FAILED else logging.WARNING
        tail = "" if delay_ms is None else f"; retry in {delay_ms} ms"
        logger.log(
            level,
            "job %s %s after attempt %d/%d: %s: %s%s",
            claim.job_id,
            status.value,
            claim.attempt,
            claim.max_attempts,
            kind,
            summary,
            tail,
            extra={**extra, "status": status.value, "duration_ms": duration},
        )

    def _abandon(self, claim: Claim) -> None:
        try:
            self.tracker.store.release(claim, utcnow())
        except StoreError as exc:
            logger.warning("job %s: could not release its lease: %s", claim.job_id, exc)

    def _notify(self, job_id: str, status: JobStatus) -> None:
        try:
            self.tracker.notifier.publish(job_id, status.value)
        except TrackedError as exc:  # the row is the truth; waiters re-read it anyway
            logger.warning("job %s: notification not sent: %s", job_id, exc)


def _process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a killed child not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


#: Column widths of the values a caller can pass (see ``models.py``).
_CONTROL_LIMITS = {"correlation_id": 64, "parent_job_id": 36, "owner_id": 255}


def _check_control(control: Mapping[str, Any], task_id: str | None) -> None:
    """Refuse control values the row cannot hold, before anything is created."""
    for name, limit in _CONTROL_LIMITS.items():
        value = control.get(name)
        if value is not None and (not str(value) or len(str(value)) > limit):
            raise InvalidPayload(f"{name} must be 1-{limit} characters")
    if task_id is not None and not 1 <= len(str(task_id)) <= 36:
        raise InvalidPayload("task_id (the job id) must be 1-36 characters, a UUID by default")


def _positive(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidPayload(f"{name} must be a positive integer, got {value!r}")
    return value


def _encode_result(result: Any) -> str | None:
    if result is None:
        return None
    try:
        return json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Unrecoverable(f"the task's result is not JSON-serialisable: {exc}") from None


def _retry_delay_ms(retry: Retry) -> int:
    when = retry.when
    if isinstance(when, int | float):
        return int(when * 1000)
    if isinstance(when, datetime):
        if when.tzinfo is None:  # Celery reads a naive eta as UTC
            when = when.replace(tzinfo=timezone.utc)
        return max(0, int((when - utcnow()).total_seconds() * 1000))
    return 0


def _mask_exception(exc: BaseException, secrets: Sequence[str], keys: Sequence[str]) -> None:
    """Mask secrets in the args of the exception and of its whole chain (``__cause__``,
    ``__context__``), in place, so Celery's logs, events and result backend never show them."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        with contextlib.suppress(AttributeError, TypeError):
            current.args = tuple(
                mask_secrets(a, secrets, keys) if isinstance(a, str) else a for a in current.args
            )
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)


@overload
def tracked_task(__func: F) -> TrackedTask: ...


@overload
def tracked_task(
    *,
    app: Celery | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    max_attempts: int | None = None,
    backoff_ms: int | None = None,
    idempotency_key: str | Callable[..., str] | None = None,
    validator: Any = None,
    **options: Any,
) -> Callable[[F], TrackedTask]: ...


def tracked_task(
    __func: Callable[..., Any] | None = None,
    *,
    app: Celery | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    max_attempts: int | None = None,
    backoff_ms: int | None = None,
    idempotency_key: str | Callable[..., str] | None = None,
    validator: Any = None,
    **options: Any,
) -> Any:
    """Declare a tracked task: ``@tracked_task`` or ``@tracked_task(queue=..., ...)``.

    Without ``app`` it is a ``shared_task`` (bound to every app, like Celery's own);
    other keywords are Celery task options (``bind``, ``name``, ``acks_late``...).
    """
    if max_attempts is not None:
        _positive(max_attempts, "max_attempts")
    tracked: dict[str, Any] = {
        "job_type": job_type,
        "max_attempts": max_attempts,
        "backoff_ms": backoff_ms,
        "idempotency_key": staticmethod(idempotency_key)
        if callable(idempotency_key)
        else idempotency_key,
        "validator": staticmethod(validator)
        if validator is not None and not inspect.isclass(validator)
        else validator,
    }
    opts = {k: v for k, v in tracked.items() if v is not None}
    if queue is not None:
        opts["tracked_queue"] = queue  # Celery 5.7 deprecates the `queue` task attribute
    opts.setdefault("base", TrackedTask)
    opts.update(options)

    def decorate(func: Callable[..., Any]) -> TrackedTask:
        factory = app.task(**opts) if app is not None else shared_task(**opts)
        return cast(TrackedTask, factory(func))

    return decorate(__func) if __func is not None else decorate


@task_revoked.connect(weak=False)
def _on_revoked(sender: Any = None, request: Any = None, **info: Any) -> None:
    """A revoked or expired message never runs: cancel its waiting job (worker main
    process). A running job is not touched; its lease decides."""
    if not isinstance(sender, TrackedTask) or request is None:
        return
    headers = getattr(request, "headers", None) or {}  # a Context: custom headers are attributes
    job_id = (
        headers.get(HEADER_JOB_ID)
        or getattr(request, HEADER_JOB_ID, None)
        or getattr(request, "id", None)
    )
    queue = headers.get(HEADER_QUEUE) or getattr(request, HEADER_QUEUE, None)
    if not job_id:
        return
    reason = "expired before it ran" if info.get("expired") else "revoked"
    try:
        if sender.tracker.cancel(str(job_id), reason=f"message {reason}"):
            logger.warning(
                "job %s cancelled: its message was %s",
                job_id,
                reason,
                extra={
                    "queue": queue,
                    "job_type": sender.tracked_job_type,
                    "job_id": job_id,
                    "status": "cancelled",
                    "attempt": None,
                    "duration_ms": None,
                },
            )
    except TrackedError as exc:
        logger.error("job %s: could not record its revocation: %s", job_id, exc)


@worker_init.connect(weak=False)
def _check_worker(sender: Any = None, **_: Any) -> None:
    """At worker start: validate the settings and warn loudly if Redis may evict keys."""
    app = getattr(sender, "app", None)
    if app is None or not any(isinstance(t, TrackedTask) for t in app.tasks.values()):
        return
    try:
        tracker = Tracker.for_app(app)
    except ConfigurationError as exc:
        # signal handlers' exceptions are only logged: exit so the worker never runs
        # tracked jobs with a setting it cannot honour
        logger.critical("celery-tracked: invalid configuration: %s", exc)
        raise SystemExit(f"celery-tracked: invalid configuration: {exc}") from None
    settings = tracker.settings
    if settings.memory_guard or not settings.check_redis_eviction:
        return
    try:
        policy = tracker.backend.eviction_policy()
    except GuardError as exc:
        logger.warning("celery-tracked: cannot reach Redis at %s: %s", settings.safe_redis_url, exc)
        return
    if policy is None:
        logger.warning(
            "celery-tracked: could not read maxmemory-policy of %s (CONFIG refused); make sure "
            "it is 'noeviction', or guard keys can be evicted",
            mask_url(settings.redis_url),
        )
    elif policy != "noeviction":
        logger.warning(
            "celery-tracked: Redis %s has maxmemory-policy=%s: guard keys can be EVICTED under "
            "memory pressure and duplicate jobs slip through to the database constraint. "
            "Set maxmemory-policy noeviction.",
            mask_url(settings.redis_url),
            policy,
        )
