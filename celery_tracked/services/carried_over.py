"""Outcomes carried over: a delivery carrying the ``retrying`` or ``failed`` that an
earlier attempt decided but could not save (its write met a database outage, headers
``tracked_pending_retry`` / ``tracked_pending_failure``) writes it before anything else,
fenced by that attempt (``CarriedOver.write_first``, the ``Runner``'s first step). The
``OutcomeWriter`` (``outcomes.py``) puts them in the headers. Knows nothing of Celery.
"""

from __future__ import annotations

import logging

from ..core.errors import StoreError
from ..core.jobs import Claim, Event, utcnow
from ..core.messages import PendingFailure
from ..core.moves import AttemptError
from ..core.outcome import Postponed, Skipped, Verdict
from ..core.ports import OutcomeStore
from ..core.retry_policy import Backoff
from ..core.run import Run
from .teller import Teller

logger = logging.getLogger("celery_tracked")


class CarriedOver:
    """Writes the outcomes an earlier attempt carried over; ``teller`` tells the hooks, and
    ``backoff`` says how long a delivery waits while the database refuses them."""

    def __init__(self, store: OutcomeStore, teller: Teller, backoff: Backoff) -> None:
        self.store = store
        self.teller = teller
        self.backoff = backoff

    def write_first(self, run: Run) -> Verdict | None:
        """Write first the outcome ``run``'s headers carry, if any. None: the delivery goes
        on and claims (a retry written, or none carried)."""
        if run.headers.pending_failure is not None:
            return self.record_pending_failure(run, run.headers.pending_failure)
        if run.headers.pending_retry is not None:  # record it first, then claim as usual
            return self.record_pending_retry(run, run.headers.pending_retry)
        return None

    def record_pending_retry(self, run: Run, failure: PendingFailure) -> Postponed | None:
        """Write the ``retrying`` an earlier attempt could not save (its completion met a
        database outage); None once written (or another attempt moved on): the delivery
        then claims the next attempt, due after the backoff."""
        attempt, delay_ms = failure.attempt, failure.retry_ms or 0
        try:
            written = self.store.retrying(_claim(run, attempt), _error(failure), delay_ms)
        except StoreError as exc:
            return self._still_unrecorded(run, "retry", exc)
        if written:
            said = f"retrying after attempt {attempt}: {_what(failure)}; retry in {delay_ms} ms"
            self._tell_late(run, Event.RETRYING, said, logging.WARNING, attempt)
        return None

    def record_pending_failure(self, run: Run, failure: PendingFailure) -> Verdict:
        """Write the failure an earlier attempt decided but could not save; no body runs."""
        attempt = failure.attempt
        try:
            exhausted = failure.retries_exhausted
            written = self.store.fail(
                _claim(run, attempt), _error(failure), retries_exhausted=exhausted
            )
        except StoreError as exc:
            return self._still_unrecorded(run, "failure", exc)
        if written:
            said = f"failed after attempt {attempt}: {_what(failure)}"
            self._tell_late(run, Event.FAILED, said, logging.ERROR, attempt)
        return Skipped("failure recorded late")

    def _tell_late(self, run: Run, event: Event, said: str, level: int, attempt: int) -> None:
        """Tell the hooks of an outcome written late (the job and its note around ``said``)."""
        self.teller.tell(run, event, f"job {run.job_id} {said} (recorded late)", level, attempt)

    def _still_unrecorded(self, run: Run, what: str, exc: StoreError) -> Postponed:
        """The delivery waits: the database still refuses the outcome it carries."""
        logger.warning("job %s: %s still not recorded: %s", run.job_id, what, exc)
        wait = self.backoff.own_wait_ms() / 1000
        return Postponed(max(0.5, wait), f"{what} still not recorded")


def _claim(run: Run, attempt: int) -> Claim:
    """The claim of the earlier attempt whose outcome a delivery carries."""
    return Claim(run.job_id, attempt, attempt)


def _error(failure: PendingFailure) -> AttemptError:
    """The carried failure as recorded now (its duration is unknown here)."""
    return AttemptError(failure.error_type, failure.error_message, None, utcnow())


def _what(failure: PendingFailure) -> str:
    """The carried failure, as the history says it: ``type: message``."""
    return f"{failure.error_type}: {failure.error_message}"
