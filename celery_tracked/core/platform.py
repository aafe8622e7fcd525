"""``Platform``: the port through which the wiring uses the task framework (Celery).

The ``Tracker``'s services know nothing of Celery; what they need of it goes through this
Protocol, which the Celery adapter implements (``celery_tracker.CeleryPlatform``): the
registry of task descriptions, publishing a job's message by task name, Celery's stored
results (``Tracker.retry`` forgets the old run's), the broker's view of queues and live
workers (the reaper's ``BrokerView``), and asking a worker to stop a running job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .description import TaskDescription
from .jobs import Job

#: A task, by its description or by its name (a task this process may not know).
TaskRef = str | TaskDescription
#: Keyword arguments, or a message's options.
Keywords = Mapping[str, Any]


class Platform(Protocol):
    """What the wiring needs of the task framework, for one app."""

    def description(self, task_name: str) -> TaskDescription | None:
        """The description of the tracked task ``task_name`` registered here, or None."""
        ...

    def descriptions(self) -> Mapping[str, TaskDescription]:
        """Every tracked task of the app, by name (its task modules imported first)."""
        ...

    def queues(self) -> set[str]:
        """The queues the app declares (its default queue, declared queues, the queues its
        routes name) and those its tracked tasks name."""
        ...

    def show(self, value: Any, limit: int) -> str:
        """``value`` as the framework's message text (``argsrepr``), about ``limit``
        characters at most."""
        ...

    def publish(
        self, task: TaskRef, args: Sequence[Any], kwargs: Keywords, options: Keywords
    ) -> None:
        """Send a message of an existing job of ``task`` with ``options`` (its task id,
        tracking headers, queue...): never creates a job. Raises whatever the broker
        raised."""
        ...

    def forget_result(self, job: Job) -> object | None:
        """Drop the framework's stored result of ``job``'s message; what it was (None:
        none, or it could not be read), for :meth:`restore_result`. Never raises."""
        ...

    def restore_result(self, job: Job, stored: object) -> None:
        """Put back what :meth:`forget_result` dropped (best effort: never raises)."""
        ...

    def terminate(self, job: Job) -> None:
        """Ask the worker running ``job`` to end its run (best effort: never raises)."""
        ...

    def ready(self, queue: str) -> int | None:
        """The messages waiting in ``queue`` (None: the broker could not say)."""
        ...

    def held(self, message_ids: Sequence[str]) -> set[str] | None:
        """Which of ``message_ids`` live workers hold (None: they could not be asked)."""
        ...
