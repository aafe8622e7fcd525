"""What a tracked message carries, and the control options a caller may pass.

:class:`TrackedHeaders` is every custom header of a tracked message (they survive Celery
retries), parsed from a delivery in one place; :class:`Control` is the caller's control
options (``idempotency_key=``, ``owner_id=``...), validated in one place before anything
is created. Pure values: no Celery, Redis or SQL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any

from .deadlines import deadline_of
from .jobs import Job
from .validation import as_job_id as as_job_id
from .validation import check_job_id as check_job_id
from .validation import check_options as check_options
from .validation import check_text as check_text
from .validation import positive as positive

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
    #: by when the job must have started: an aware ``datetime``, or a ``timedelta``/seconds
    #: after the enqueue (``deadlines.py``); None: the task's ``deadline`` option
    deadline: Any = None
    #: how the caller spelled the deadline (``_deadline`` or ``deadline``): errors name it
    deadline_name: str = field(default="deadline", compare=False, metadata={"spelling": True})

    def __post_init__(self) -> None:
        for name, limit in _LIMITS.items():
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, check_text(value, name, limit))
        positive(self.max_attempts, "max_attempts")
        # TypeError, InvalidPayload: before anything is made
        deadline_of(self.deadline, self.deadline_name)

    @classmethod
    def pop_from(cls, options: dict[str, Any]) -> Control:
        """Take the control options out of ``apply_async``'s keyword options (the deadline
        as ``_deadline=``, as ``enqueue`` spells it, or ``deadline=``)."""
        name = "deadline"
        if "_deadline" in options:
            options["deadline"], name = options.pop("_deadline"), "_deadline"
        return cls(**{f.name: options.pop(f.name, None) for f in _options()}, deadline_name=name)

    @classmethod
    def underscored(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``enqueue``'s untyped control keywords of 0.1 (``_idempotency_key=``, ...,
        ``_options=``), kept working: taken out of ``kwargs``, by their names (and the
        deadline's spelling, ``deadline_name``)."""
        chosen = {name[1:]: kwargs.pop(name) for name in cls.keywords() if name in kwargs}
        return {**chosen, "deadline_name": "_deadline"}

    @classmethod
    def keywords(cls) -> list[str]:
        """The names of ``enqueue``'s untyped control keywords (``_idempotency_key``...)."""
        return [f"_{f.name}" for f in _options()] + ["_options"]


def _options() -> list[Field[Any]]:
    """The control options a caller passes (not how they were spelled)."""
    return [f for f in fields(Control) if not f.metadata.get("spelling")]


#: ``apply_async`` keywords that are control options, not Celery's.
CONTROL_OPTIONS = tuple(f.name for f in _options())
