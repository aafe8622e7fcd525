"""What a tracked message carries, and the control options a caller may pass.

:class:`TrackedHeaders` is every custom header of a tracked message (they survive Celery
retries), parsed from a delivery in one place; :class:`Control` is the caller's control
options (``idempotency_key=``, ``owner_id=``...), validated in one place before anything
is created. Pure values: no Celery, Redis or SQL.
"""

from __future__ import annotations

import json
import numbers
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from .errors import InvalidPayload
from .jobs import Job

HEADER_JOB_ID = "tracked_job_id"
HEADER_CORRELATION_ID = "tracked_correlation_id"
HEADER_PARENT_JOB_ID = "tracked_parent_job_id"
HEADER_QUEUE = "tracked_queue"
#: The revision of the job's message (``rerun.py``): a delivery of an older one runs nothing.
HEADER_REVISION = "tracked_revision"
#: A failure decided by an attempt whose write failed: the next delivery records it and
#: runs no body.
HEADER_PENDING_FAILURE = "tracked_pending_failure"
#: A retry decided by an attempt whose write failed (its completion met a database
#: outage): the next delivery records ``retrying`` first, then claims the next attempt.
#: A header of its own, so a worker that does not know it takes the job over as before.
HEADER_PENDING_RETRY = "tracked_pending_retry"


@dataclass(frozen=True)
class PendingFailure:
    """A failed attempt's outcome an attempt decided but could not write: final (``failed``,
    carried in ``HEADER_PENDING_FAILURE``) or, with ``retry_ms``, ``retrying`` after that
    backoff (a completion the database could not save; ``HEADER_PENDING_RETRY``)."""

    attempt: int
    error_type: str
    error_message: str
    #: the attempt used up the retries (else the job was stopped)
    retries_exhausted: bool = False
    #: record ``retrying`` with this backoff (ms) instead of ``failed``
    retry_ms: int | None = None

    def encode(self) -> str:
        data: dict[str, Any] = {
            "attempt": self.attempt,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "retries_exhausted": self.retries_exhausted,
        }
        if self.retry_ms is not None:
            data["retry_ms"] = self.retry_ms
        return json.dumps(data)

    @classmethod
    def decode(cls, text: str) -> PendingFailure:
        data = json.loads(text)
        retry_ms = data.get("retry_ms")
        return cls(
            int(data["attempt"]),
            str(data["error_type"]),
            str(data["error_message"]),
            bool(data.get("retries_exhausted", False)),
            None if retry_ms is None else max(0, int(retry_ms)),
        )


@dataclass(frozen=True)
class TrackedHeaders:
    """The custom headers of a tracked message."""

    job_id: str
    correlation_id: str | None = None
    parent_job_id: str | None = None
    queue: str | None = None
    pending_failure: PendingFailure | None = None
    revision: int = 0
    pending_retry: PendingFailure | None = None

    @classmethod
    def read(cls, headers: Mapping[str, Any] | None, request: Any = None) -> TrackedHeaders | None:
        """From a message's ``headers`` (or a Celery request, whose custom headers are
        attributes); None when the message was not sent through celery-tracked."""

        def get(name: str) -> Any:
            value = (headers or {}).get(name)
            return getattr(request, name, None) if value is None and request is not None else value

        job_id = get(HEADER_JOB_ID)
        if not job_id:
            return None
        pending, retry = get(HEADER_PENDING_FAILURE), get(HEADER_PENDING_RETRY)
        return cls(
            job_id=str(job_id),
            correlation_id=_text(get(HEADER_CORRELATION_ID)),
            parent_job_id=_text(get(HEADER_PARENT_JOB_ID)),
            queue=_text(get(HEADER_QUEUE)),
            pending_failure=PendingFailure.decode(str(pending)) if pending else None,
            revision=_revision(get(HEADER_REVISION)),
            pending_retry=PendingFailure.decode(str(retry)) if retry else None,
        )

    @classmethod
    def of(cls, job: Job) -> TrackedHeaders:
        """The headers of ``job``'s current message, from its row (a ``Job``)."""
        return cls(
            job.id, job.correlation_id, job.parent_job_id, job.queue_name, None, job.revision
        )

    def to_headers(self) -> dict[str, Any]:
        headers: dict[str, Any] = {
            HEADER_JOB_ID: self.job_id,
            HEADER_CORRELATION_ID: self.correlation_id,
            HEADER_PARENT_JOB_ID: self.parent_job_id,
            HEADER_QUEUE: self.queue,
        }
        if self.pending_failure is not None:
            headers[HEADER_PENDING_FAILURE] = self.pending_failure.encode()
        if self.pending_retry is not None:
            headers[HEADER_PENDING_RETRY] = self.pending_retry.encode()
        if self.revision:
            headers[HEADER_REVISION] = self.revision
        return headers

    def with_pending_failure(self, failure: PendingFailure) -> TrackedHeaders:
        return replace(self, pending_failure=failure)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _revision(value: Any) -> int:
    """A message's revision (0 when it has none: sent before debounce and retry existed)."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


#: Column widths of the values a caller can pass (see ``models.py``).
_LIMITS = {"correlation_id": 64, "parent_job_id": 36, "owner_id": 255}
#: The largest value of an ``Integer`` column on every backend.
MAX_INT = 2**31 - 1
#: The widest ``countdown``/``expires`` in seconds (beyond it a date would overflow).
MAX_SECONDS = float(MAX_INT)


def check_text(value: Any, name: str, limit: int) -> str:
    """``value`` as text a column of width ``limit`` can hold, else ``InvalidPayload``."""
    text = str(value)
    if not 1 <= len(text) <= limit:
        raise InvalidPayload(f"{name} must be 1-{limit} characters, got {len(text)}")
    if "\x00" in text:
        raise InvalidPayload(f"{name} must not contain a NUL byte")
    return text


@dataclass(frozen=True)
class Control:
    """The caller's control options of one enqueue (all optional).

    Raises ``InvalidPayload`` on construction when a value cannot be stored.
    """

    idempotency_key: Any = None
    correlation_id: str | None = None
    parent_job_id: str | None = None
    owner_id: str | None = None
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        for name, limit in _LIMITS.items():
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, check_text(value, name, limit))
        positive(self.max_attempts, "max_attempts")

    @classmethod
    def pop_from(cls, options: dict[str, Any]) -> Control:
        """Take the control options out of ``apply_async``'s keyword options."""
        return cls(**{f.name: options.pop(f.name, None) for f in fields(cls)})

    @classmethod
    def underscored(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``enqueue``'s untyped control keywords of 0.1 (``_idempotency_key=``, ...,
        ``_options=``), kept working: taken out of ``kwargs``, by their names."""
        names = [f"_{f.name}" for f in fields(cls)] + ["_options"]
        return {name[1:]: kwargs.pop(name) for name in names if name in kwargs}


#: ``apply_async`` keywords that are control options, not Celery's.
CONTROL_OPTIONS = tuple(f.name for f in fields(Control))


def check_job_id(task_id: Any) -> str | None:
    """A caller-chosen job id (``task_id``, a ``str`` or ``uuid.UUID``) must fit the id
    column."""
    return None if task_id is None else check_text(task_id, "task_id", 36)


def as_job_id(value: Any, name: str = "job_id") -> str:
    """A job id given to a read or an operation: a ``str`` or a ``uuid.UUID``.

    Raises:
        TypeError: any other type (naming the argument).
        InvalidPayload: a string no job id can be (a NUL byte).
    """
    if isinstance(value, uuid.UUID):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or uuid.UUID, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidPayload(f"{name} must not contain a NUL byte")
    return value


def positive(value: Any, name: str) -> int | None:
    """``value`` if it is a positive integer an ``Integer`` column holds (or None); else
    ``InvalidPayload``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise InvalidPayload(
            f"{name} must be a positive integer, got {value!r} (at most {MAX_INT})"
        )
    return value


def check_options(options: Mapping[str, Any]) -> None:
    """Celery's scheduling options must be usable before anything is created: Celery
    would accept some bad ones and fail later, in the worker or the publish.

    Raises:
        TypeError: ``countdown``, ``eta``, ``expires`` or ``priority`` of the wrong type.
        InvalidPayload: a value of the right type no message can carry.
    """
    _seconds(options.get("countdown"), "countdown")
    for name in ("eta", "expires"):
        value = options.get(name)
        if name == "expires" and _is_number(value):
            _seconds(value, name)
        elif isinstance(value, str):
            try:
                datetime.fromisoformat(value)
            except ValueError:
                raise InvalidPayload(f"{name} must be an ISO 8601 date, got {value!r}") from None
        elif value is not None and not isinstance(value, datetime):
            kinds = "a datetime" + (", a number" if name == "expires" else "")
            raise TypeError(f"{name} must be {kinds} or an ISO 8601 string, not {type(value)}")
    priority = options.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if priority is not None and not 0 <= priority <= 255:
        raise InvalidPayload(f"priority must be from 0 to 255, got {priority}")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _seconds(value: Any, name: str) -> None:
    if value is None:
        return
    if not _is_number(value):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not -MAX_SECONDS <= float(value) <= MAX_SECONDS:  # also refuses NaN
        raise InvalidPayload(f"{name} must be a finite number of seconds, got {value!r}")
