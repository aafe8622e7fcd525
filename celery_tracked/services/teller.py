"""Telling the hooks: each transition of a delivery becomes one ``Transition`` handed to
``Hooks.after_transition`` (``core/hooks.py``: the log line, the terminal notification,
the metrics). The ``Runner`` tells what a delivery did before its body (processing,
skipped, postponed, a lost run ended), the ``OutcomeWriter`` what its outcome write did,
``CarriedOver`` an outcome written late; the wording of an attempt's failure lives here
once. Knows nothing of Celery.
"""

from __future__ import annotations

import logging

from ..core.attempt import Attempt
from ..core.hooks import Hooks, Transition
from ..core.jobs import Event, JobStatus
from ..core.outcomes import Failure
from ..core.run import Run


class Teller:
    """Tells ``hooks`` the transitions of the deliveries run in this process."""

    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks

    def tell(
        self,
        run: Run,
        event: Event,
        message: str,
        level: int = logging.INFO,
        attempt: int | None = None,
    ) -> None:
        """A transition of ``run``'s job (of its attempt ``attempt``, when it has one)."""
        self.hooks.after_transition(_transition(run, event, message, level, attempt, None))

    def tell_attempt(
        self,
        attempt: Attempt,
        event: Event,
        message: str,
        duration_ms: int,
        level: int = logging.INFO,
    ) -> None:
        """A transition of the running ``attempt``, ``duration_ms`` after its body began."""
        run, number = attempt.run, attempt.claim.attempt
        transition = _transition(run, event, message, level, number, duration_ms)
        self.hooks.after_transition(transition)

    def tell_failure(self, attempt: Attempt, failure: Failure, line: str, duration_ms: int) -> None:
        """``attempt``'s failure, written: the job ``retrying`` or ``failed``; ``line``: its
        error as its event records it (``AttemptError.line``: with the plan's note)."""
        claim = attempt.claim
        status = JobStatus.FAILED if failure.final else JobStatus.RETRYING
        tail = "" if failure.retry_ms is None else f"; retry in {failure.retry_ms} ms"
        message = (
            f"job {claim.job_id} {status.value} after attempt {claim.attempt}/"
            f"{claim.max_attempts}: {line}{tail}"
        )
        level = logging.ERROR if failure.final else logging.WARNING
        self.tell_attempt(attempt, Event(status.value), message, duration_ms, level)


def _transition(
    run: Run,
    event: Event,
    message: str,
    level: int,
    attempt: int | None,
    duration_ms: int | None,
) -> Transition:
    return Transition.of(
        event,
        run.job_id,
        message,
        queue=run.queue,
        job_type=run.job_type,
        attempt=attempt,
        duration_ms=duration_ms,
        level=level,
    )
