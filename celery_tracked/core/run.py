"""``Run``: one delivery of a tracked message to this worker, as the services see it.

The Celery adapter (``task.py``) builds it from the request; the ``Runner``, its
``OutcomeWriter`` and the hooks read it. A value: no Celery, Redis or SQL here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .limits import DeliveryLimits
from .messages import TrackedHeaders
from .outcome import NO_SIGNALS, Signals
from .retry_policy import RetryPolicy

__all__ = ["Run"]


@dataclass(frozen=True)
class Run:
    """One delivery of a tracked message to this worker."""

    headers: TrackedHeaders
    task_name: str
    job_type: str
    queue: str
    worker: str
    backoff_base_ms: int
    #: the call's secret values (computed only when an error must be masked)
    secrets: Callable[[], Sequence[str]]
    #: run in this process (``task_always_eager``, ``apply()``): a retry comes at once
    inline: bool = False
    #: the task's retry policy (which errors are retried, the delays' shape)
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    #: the task's rate and concurrency limits for this delivery (``limits.py``)
    limits: DeliveryLimits | None = None
    #: which exceptions are the framework's control signals (the adapter's: Celery's)
    signals: Signals = NO_SIGNALS
    #: the form the framework stores a body's return value in, also the row's ``result``
    #: (the adapter's: an ``AsyncResult`` as Celery's tuple form, ``values.py``)
    stored_result: Callable[[Any], Any] = field(default=lambda result: result)

    @property
    def job_id(self) -> str:
        return self.headers.job_id
