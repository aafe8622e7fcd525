"""Celery's control exceptions, read for the core (``outcome.Signals``).

The core classifies how a body ended without importing Celery: the adapter builds each
``Run`` with :data:`CELERY_SIGNALS`, which says what Celery's ``Ignore``, ``Reject`` and
``Retry`` ask of the run (``outcome.Signal``), and gives the ``MaxRetriesExceededError`` a
job's final failure raises for a retry without a cause. The exceptions themselves are kept
as they are: a verdict hands the very exception the body raised back to Celery.
"""

from __future__ import annotations

from datetime import datetime

from celery.exceptions import Ignore, MaxRetriesExceededError, Reject, Retry

from ..core.outcomes import Signal, SignalKind

__all__ = ["CELERY_SIGNALS", "CelerySignals"]


class CelerySignals:
    """Celery's ``Ignore``/``Reject``/``Retry`` as :class:`~celery_tracked.outcome.Signal`."""

    def read(self, error: BaseException) -> Signal | None:
        if isinstance(error, Ignore):
            return Signal(SignalKind.IGNORE)
        if isinstance(error, Reject):
            return Signal(SignalKind.REJECT, requeue=bool(getattr(error, "requeue", False)))
        if isinstance(error, Retry):
            cause = error.exc if isinstance(error.exc, BaseException) else None
            when = error.when if isinstance(error.when, int | float | datetime) else None
            return Signal(SignalKind.RETRY, when=when, cause=cause)
        return None

    def out_of_retries(self) -> BaseException:
        return MaxRetriesExceededError("Can't retry: the job has no attempt left")


CELERY_SIGNALS = CelerySignals()
