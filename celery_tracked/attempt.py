"""The running attempt, as the body's own calls into Celery see it.

The :class:`~celery_tracked.runner.Runner` opens it around the body (:func:`running`);
``TrackedTask`` reads it (:func:`current`) to give the body Celery's ``request.retries``
(the retries made before this attempt) and to make a body's ``self.retry`` end the job as
Celery does once no retry remains: Celery raises the body's exception (or
``MaxRetriesExceededError``) instead of re-publishing, and the attempt remembers that
exception (:meth:`Attempt.give_up`) so the runner fails the job with it, retries used up;
while one remains, the re-publish time (:meth:`Attempt.retrying`) lets the job's backoff end
with the message's countdown, not after it.
No Celery, Redis or SQL here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

from .jobs import Claim


@dataclass
class Attempt:
    """One running attempt of a job (attempt ``number`` of ``max_attempts``)."""

    job_id: str
    number: int
    max_attempts: int
    #: the exception Celery's ``retry`` raised because no retry remained
    given_up: BaseException | None = None
    #: when the body's own retry published the next attempt's message
    retry_sent: datetime | None = None

    @property
    def retries(self) -> int:
        """The retries made before this attempt: Celery's ``request.retries``."""
        return self.number - 1

    @property
    def max_retries(self) -> int:
        """The most retries the job may make: Celery's ``max_retries``."""
        return self.max_attempts - 1

    def give_up(self, error: BaseException) -> None:
        """The body's own retry found no retry left and raised ``error``."""
        self.given_up = error

    def retrying(self, sent: datetime) -> None:
        """The body's own retry published the next attempt's message at ``sent``."""
        self.retry_sent = sent

    def gave_up_with(self, error: BaseException | None) -> bool:
        """Whether the body ended with the exception of a retry that gave up."""
        return error is not None and error is self.given_up


_current: ContextVar[Attempt | None] = ContextVar("celery_tracked_attempt", default=None)


@contextmanager
def running(claim: Claim) -> Iterator[Attempt]:
    """``claim``'s attempt is the running one while the body runs."""
    attempt = Attempt(claim.job_id, claim.attempt, claim.max_attempts)
    token = _current.set(attempt)
    try:
        yield attempt
    finally:
        _current.reset(token)


def current(job_id: str) -> Attempt | None:
    """The running attempt of ``job_id`` in this context, if its body is running."""
    attempt = _current.get()
    return attempt if attempt is not None and attempt.job_id == job_id else None
