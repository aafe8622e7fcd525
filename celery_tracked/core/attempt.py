"""The running attempt: what the hooks and the body's own calls act on.

The :class:`~celery_tracked.runner.Runner` makes one :class:`Attempt` when a delivery
claimed its job and hands it, as an argument, to the hooks (``Hooks.running``,
``completion_rows``, ``failure_rows``, ``after_attempt``) and to the body callable: no
context variable carries it between the runner and the features. The Celery adapter keeps
it on Celery's own request while the body runs (``request_state.py``), so that
``self.set_progress``, ``self.then``, ``self.retry``... reach the attempt of the delivery
they are called from.

A hook may :meth:`~Attempt.attach` what the body's calls need (the progress reporter, the
pipeline step); the adapter finds it with :meth:`~Attempt.part`.

It also keeps what the body's own ``self.retry`` did: Celery raises the body's exception
(or ``MaxRetriesExceededError``) instead of re-publishing once no retry remains, and the
attempt remembers that exception (:meth:`Attempt.give_up`) so the runner fails the job
with it, retries used up; while one remains, the re-publish time
(:meth:`Attempt.retrying`) lets the job's backoff end with the message's countdown, not
after it. No Celery, Redis or SQL here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from .fences import HeldTransaction
from .jobs import Claim
from .run import Run

T = TypeVar("T")

__all__ = ["Attempt"]


@dataclass(eq=False)
class Attempt:
    """One running attempt of a job: ``run``'s delivery holding ``claim``."""

    run: Run
    claim: Claim
    #: the exception Celery's ``retry`` raised because no retry remained
    given_up: BaseException | None = None
    #: when the body's own retry published the next attempt's message
    retry_sent: datetime | None = None
    #: the status its outcome write recorded (``completed``, ``retrying``, ``failed``,
    #: ``cancelled`` as asked), once that write committed; None while none did
    recorded: str | None = None
    #: the body's own transaction, parked at the end of its ``transaction()`` block: the
    #: completion commits it, any other outcome rolls it back
    held: HeldTransaction | None = None
    _parts: dict[type, object] = field(default_factory=dict, repr=False)

    @property
    def job_id(self) -> str:
        return self.claim.job_id

    @property
    def number(self) -> int:
        """This attempt's number, from 1."""
        return self.claim.attempt

    @property
    def max_attempts(self) -> int:
        return self.claim.max_attempts

    @property
    def retries(self) -> int:
        """The retries made before this attempt: Celery's ``request.retries``."""
        return self.number - 1

    @property
    def max_retries(self) -> int:
        """The most retries the job may make: Celery's ``max_retries``."""
        return self.max_attempts - 1

    def attach(self, part: object) -> None:
        """Keep ``part`` for the body's calls (one per class; a hook attaches its own)."""
        self._parts[type(part)] = part

    def part(self, kind: type[T]) -> T | None:
        """The part of class ``kind`` a hook attached, if one did."""
        found = self._parts.get(kind)
        return found if isinstance(found, kind) else None

    def give_up(self, error: BaseException) -> None:
        """The body's own retry found no retry left and raised ``error``."""
        self.given_up = error

    def retrying(self, sent: datetime) -> None:
        """The body's own retry published the next attempt's message at ``sent``."""
        self.retry_sent = sent

    def drop_held(self) -> None:
        """Roll back the body's parked transaction, if any (before another outcome)."""
        held, self.held = self.held, None
        if held is not None:
            held.abandon()

    def gave_up_with(self, error: BaseException | None) -> bool:
        """Whether the body ended with the exception of a retry that gave up."""
        return error is not None and error is self.given_up
