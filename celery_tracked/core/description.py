"""``TaskDescription``: what every producer path needs to know of one tracked task.

Built once per task class by the Celery adapter (``TrackedTask.description``, from the
options checked when the class was made: ``options.py``) and read by every path that
makes or sends a job of the task: ``enqueue``/``apply_async`` (``producer.py``), a step's
successors (``pipelines.py``), ``Tracker.retry`` (``rerun.py``), the relay and the reaper
(through the platform port, ``platform.py``). Nothing else reads the task class's internals.

Pure: no Celery, Redis or SQL. Celery's routing and publish stay in the adapter: they are
handed in as the ``route`` callable, asked only when neither the call nor the task names a
queue, and the ``send`` callable, which the platform port's ``publish`` uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .calls import CallRules, CallShape
from .circuits import CircuitRule
from .errors import InvalidPriority
from .keys import KeyRule
from .limits import Limits
from .redact import Redaction
from .retry_policy import RetryPolicy

#: ``route(options, args, kwargs)``: the queue the framework's routing sends a call to.
Route = Callable[[Mapping[str, Any], Sequence[Any], Mapping[str, Any]], str]
#: ``highest_priority(queue)``: the highest message priority the broker takes on ``queue``.
HighestPriority = Callable[[str], int]


def any_priority(queue: str) -> int:
    """The widest range a message priority may have (AMQP's, 0-255)."""
    return 255


#: ``send(args, kwargs, options)``: publish a message of an existing job of the task (its
#: task id and tracking headers in ``options``): never a new job.
Send = Callable[[Sequence[Any], Mapping[str, Any], Mapping[str, Any]], None]


@dataclass(frozen=True)
class TaskDescription:
    """One tracked task, as its producers see it (a frozen value)."""

    #: the task's registered name
    name: str
    #: its logical type (default: the name); idempotency keys are unique per type
    job_type: str
    #: how its body takes its arguments
    shape: CallShape = field(compare=False)
    #: the framework's routing, asked when neither the call nor the task names a queue
    route: Route = field(compare=False)
    #: the framework's publish of a message of one of its jobs (``port.Platform.publish``)
    send: Send = field(compare=False)
    #: attempts, backoff and which errors are retried (``retry_policy.py``)
    retry: RetryPolicy
    #: how long a key keeps new jobs out (``keys.py``)
    keys: KeyRule
    #: its global rate limit and per-key concurrency limit (``limits.py``)
    limits: Limits
    #: a pydantic model class or a callable refusing the named arguments (None: none)
    validator: Any = None
    #: its ``idempotency_key``: a template over the named arguments, or a callable
    idempotency_key: str | Callable[..., str] | None = None
    #: its ``retention`` option, as declared (``core/cleanup.py``)
    retention: Any = None
    #: the queue it declares (``tracked_queue``, else Celery's ``queue``): a name or an
    #: object with a ``name`` (a kombu ``Queue``); None: routed
    static_queue: Any = None
    #: True when ``tracked_queue`` names it: its messages are sent with that queue
    pins_queue: bool = False
    #: its messages' priority (Celery's ``priority`` task option); None: the broker's default
    priority: int | None = None
    #: the circuit breaker it names (``circuits.py``); None: none
    circuit: CircuitRule | None = None
    #: the broker's range, asked only of a job with a priority (the adapter's)
    highest_priority: HighestPriority = field(compare=False, default=any_priority)
    #: its ``deadline`` option in seconds after the enqueue (None: none; ``deadlines.py``)
    deadline_s: float | None = None

    def queue(
        self, options: Mapping[str, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> str:
        """The queue a call goes to: the call's ``queue`` option, the task's, else routed."""
        queue = options.get("queue") or self.static_queue
        if queue is None:
            return self.route(options, args, kwargs)
        return str(getattr(queue, "name", queue))

    def call_rules(self, redaction: Redaction, max_payload_bytes: int) -> CallRules:
        """What this task asks of its calls, under the app's settings."""
        return CallRules(
            task_name=self.name,
            redaction=redaction,
            max_payload_bytes=max_payload_bytes,
            validator=self.validator,
            key=self.idempotency_key,
            concurrency_key=self.limits.concurrency_key,
            fairness_key=self.limits.fairness_key,
        )

    def priority_of(self, options: Mapping[str, Any], queue: str) -> int | None:
        """A call's priority: its ``priority`` option (type checked by ``check_options``),
        else the task's; None when neither gives one.

        Raises:
            InvalidPriority: out of the broker's range for ``queue``.
        """
        priority = options.get("priority")
        if priority is None:
            priority = self.priority
        if priority is None:
            return None
        highest = self.highest_priority(queue)
        if not 0 <= priority <= highest:
            raise InvalidPriority(priority, highest, queue)
        return int(priority)

    def attempts(self, default: int) -> int:
        """The attempts a new job gets: the task's ``max_attempts``, else ``default``."""
        return self.retry.max_attempts or default
