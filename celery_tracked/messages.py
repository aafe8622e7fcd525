"""What a tracked message carries, and the control options a caller may pass.

:class:`TrackedHeaders` is every custom header of a tracked message (they survive Celery
retries), parsed from a delivery in one place; :class:`Control` is the caller's control
options (``idempotency_key=``, ``owner_id=``...), validated in one place before anything
is created. Pure values: no Celery, Redis or SQL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import InvalidPayload

HEADER_JOB_ID = "tracked_job_id"
HEADER_CORRELATION_ID = "tracked_correlation_id"
HEADER_PARENT_JOB_ID = "tracked_parent_job_id"
HEADER_QUEUE = "tracked_queue"
#: A failure decided by an attempt whose write failed: the next delivery records it and
#: runs no body.
HEADER_PENDING_FAILURE = "tracked_pending_failure"


@dataclass(frozen=True)
class PendingFailure:
    """A final failure an attempt decided but could not write."""

    attempt: int
    error_type: str
    error_message: str

    def encode(self) -> str:
        return json.dumps(
            {
                "attempt": self.attempt,
                "error_type": self.error_type,
                "error_message": self.error_message,
            }
        )

    @classmethod
    def decode(cls, text: str) -> PendingFailure:
        data = json.loads(text)
        return cls(int(data["attempt"]), str(data["error_type"]), str(data["error_message"]))


@dataclass(frozen=True)
class TrackedHeaders:
    """The custom headers of a tracked message."""

    job_id: str
    correlation_id: str | None = None
    parent_job_id: str | None = None
    queue: str | None = None
    pending_failure: PendingFailure | None = None

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
        pending = get(HEADER_PENDING_FAILURE)
        return cls(
            job_id=str(job_id),
            correlation_id=_text(get(HEADER_CORRELATION_ID)),
            parent_job_id=_text(get(HEADER_PARENT_JOB_ID)),
            queue=_text(get(HEADER_QUEUE)),
            pending_failure=PendingFailure.decode(str(pending)) if pending else None,
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
        return headers

    def with_pending_failure(self, failure: PendingFailure) -> TrackedHeaders:
        return replace(self, pending_failure=failure)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


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

    def __post_init__(self) -> None:
        for name, limit in _LIMITS.items():
            value = getattr(self, name)
            if value is not None:
                if not str(value) or len(str(value)) > limit:
                    raise InvalidPayload(f"{name} must be 1-{limit} characters")
                object.__setattr__(self, name, str(value))
        positive(self.max_attempts, "max_attempts")

    @classmethod
    def pop_from(cls, options: dict[str, Any]) -> Control:
        """Take the control options out of ``apply_async``'s keyword options."""
        return cls(**{f.name: options.pop(f.name, None) for f in fields(cls)})


#: ``apply_async`` keywords that are control options, not Celery's.
CONTROL_OPTIONS = tuple(f.name for f in fields(Control))


def check_job_id(task_id: Any) -> str | None:
    """A caller-chosen job id (``task_id``) must fit the id column."""
    if task_id is not None and not 1 <= len(str(task_id)) <= 36:
        raise InvalidPayload("task_id (the job id) must be 1-36 characters, a UUID by default")
    return None if task_id is None else str(task_id)


def positive(value: Any, name: str) -> int | None:
    """``value`` if it is a positive integer (or None); else ``InvalidPayload``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidPayload(f"{name} must be a positive integer, got {value!r}")
    return value
