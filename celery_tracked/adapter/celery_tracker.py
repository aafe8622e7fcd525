"""``Tracker``: one per Celery app, created lazily from ``app.conf``.

The public tracker is the Celery-free facade :class:`~celery_tracked.tracker.BaseTracker`
of the app's services (built by ``wiring.build``), given :class:`CeleryPlatform`: Celery's
implementation of the platform port (``platform.py``). Get it with :meth:`Tracker.for_app`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

from celery import Celery
from celery.utils.saferepr import saferepr

from ..core.description import TaskDescription
from ..core.errors import UnknownTask
from ..core.jobs import EnqueueResult, Job
from ..core.platform import Keywords, TaskRef
from ..core.settings import Settings
from ..services.cancelling import Shown
from ..tracker import BaseTracker
from .broker import CeleryBroker
from .celery_state import settings_for
from .stopping import ask_to_terminate

logger = logging.getLogger("celery_tracked")

_ATTR = "_celery_tracked_tracker"
_create_lock = threading.Lock()


class CeleryPlatform:
    """The platform port (``platform.Platform``) for one Celery app."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.broker = CeleryBroker(app)

    def description(self, task_name: str) -> TaskDescription | None:
        found = getattr(self.app.tasks.get(task_name), "description", None)
        return found if isinstance(found, TaskDescription) else None

    def descriptions(self) -> Mapping[str, TaskDescription]:
        self.app.loader.import_default_modules()  # the tasks' modules
        found = {name: getattr(task, "description", None) for name, task in self.app.tasks.items()}
        return {name: d for name, d in found.items() if isinstance(d, TaskDescription)}

    def queues(self) -> set[str]:
        conf = self.app.conf
        names: set[Any] = {conf.task_default_queue or "celery"}
        names.update(getattr(q, "name", None) for q in conf.task_queues or ())
        routes = conf.task_routes
        for table in routes if isinstance(routes, list | tuple) else [routes]:
            for route in table.values() if isinstance(table, Mapping) else ():
                queue = route.get("queue") if isinstance(route, Mapping) else None
                names.add(getattr(queue, "name", queue))
        names.update(
            getattr(d.static_queue, "name", d.static_queue) for d in self.descriptions().values()
        )
        return {str(n) for n in names if n}

    def show(self, value: Any, limit: int) -> str:
        return str(saferepr(value, limit))  # the reprs Celery itself makes

    def publish(
        self, task: TaskRef, args: Sequence[Any], kwargs: Keywords, options: Keywords
    ) -> None:
        if isinstance(task, TaskDescription):  # the task's own re-publish
            task.send(tuple(args), dict(kwargs), options)
            return
        registered = self.app.tasks.get(task)
        if registered is not None:  # a tracked task re-publishes an existing job
            registered.apply_async(tuple(args), dict(kwargs), **options)
        else:  # a process that never imported the task (an admin script, a web process)
            self.app.send_task(task, tuple(args), dict(kwargs), **options)

    def forget_result(self, job: Job) -> object | None:
        """Drop Celery's stored result of the job's old run, so ``AsyncResult.get()``
        waits for the new one (best effort: a backend without results has nothing to
        forget)."""
        try:
            old = self.app.AsyncResult(job.celery_task_id or job.id)
            stored = (old.state, old.result, old.traceback)
            old.forget()
        except Exception as exc:  # NotImplementedError (no backend), a backend outage...
            logger.debug("job %s: old result not forgotten: %s", job.id, exc)
            return None
        return None if stored[0] == "PENDING" else stored

    def restore_result(self, job: Job, stored: object) -> None:
        state, result, traceback = cast("tuple[str, Any, Any]", stored)  # forget_result's
        try:
            self.app.backend.store_result(job.celery_task_id or job.id, result, state, traceback)
        except Exception as exc:
            logger.warning("job %s: its old result could not be put back: %s", job.id, exc)

    def terminate(self, job: Job) -> None:
        ask_to_terminate(self.app, job)

    def ready(self, queue: str) -> int | None:
        return self.broker.ready(queue)

    def held(self, message_ids: Sequence[str]) -> set[str] | None:
        return self.broker.held(message_ids)


class Tracker(BaseTracker):
    """The tracking side of one Celery app. Get it with ``Tracker.for_app(app)``.

    Methods only (``BaseTracker``): ``settings`` and ``app`` are read-only values."""

    def __init__(self, app: Celery, settings: Settings) -> None:
        self._app = app
        super().__init__(settings, CeleryPlatform(app))

    @property
    def app(self) -> Celery:
        """The Celery app this tracker tracks."""
        return self._app

    @classmethod
    def for_app(cls, app: Celery) -> Tracker:
        """The app's tracker, created (and its settings validated) on first use.

        Raises:
            ConfigurationError: a ``tracked_*`` setting is invalid.
        """
        tracker: Tracker | None = app.__dict__.get(_ATTR)
        if tracker is None:
            with _create_lock:
                tracker = app.__dict__.get(_ATTR)
                if tracker is None:
                    tracker = cls(app, settings_for(app))
                    setattr(app, _ATTR, tracker)
        return tracker

    def cancel_unknown(self, job_id: str, revision: int, task_name: str, worker: str) -> bool:
        """A worker received this message of the job and has no task ``task_name``
        registered: Celery discarded it (``task_unknown``). Cancel the job (only while that
        message is its current one), ``error_type`` ``UnknownTask``; False if it is not
        waiting (any more)."""
        reason = self.settings.masking.mask(
            f"not run: worker {worker} received it but has no task {task_name!r} registered "
            "(renamed or removed since it was enqueued?), and Celery discarded its message; "
            "register the task and retry the job, or enqueue it again under the task's "
            "new name"
        )
        shown = Shown(f"job {job_id} cancelled: {reason}", level=logging.ERROR)
        return self._services.canceller(
            job_id, reason, revision=revision, shown=shown, error_type=UnknownTask.__name__
        )

    def enqueue(self, task_name: str, /, *args: Any, **kwargs: Any) -> EnqueueResult[Any]:
        """Enqueue a job of the tracked task registered as ``task_name``, by name: what
        ``app.tasks[task_name].enqueue(*args, **kwargs)`` does (the same row, guard,
        redaction and publish; control options as ``_idempotency_key=``...), for a
        producer that knows only the name. The task must be registered in this process
        (its module imported; the app's ``include``/``imports`` are imported first).

        Raises:
            UnknownTask: no task of that name here, or it is not a tracked task (nothing
                was created).
            InvalidPayload: the arguments were refused (nothing was created).
            EnqueueError: Redis, the database or the broker failed.
        """
        task = self._tracked(task_name)
        return cast("EnqueueResult[Any]", task.enqueue(*args, **kwargs))

    def _tracked(self, task_name: str) -> Any:
        """The tracked task registered as ``task_name`` in this process."""
        if not isinstance(task_name, str):
            raise UnknownTask(repr(task_name), "a task name is a string")
        if task_name not in self._app.tasks:
            self._app.loader.import_default_modules()  # include=/imports= not yet imported
        task = self._app.tasks.get(task_name)
        if task is None:
            raise UnknownTask(
                task_name,
                "no task of this name is registered in this process: import the module "
                "declaring it (or list it in the app's include=/imports), or send it from a "
                "process that has it (app.send_task sends it untracked: no row, no guard)",
            )
        if not isinstance(getattr(task, "description", None), TaskDescription):
            raise UnknownTask(
                task_name,
                "is a plain Celery task, not a tracked one: declare it with @tracked_task "
                "or base=TrackedTask to enqueue it tracked",
            )
        return task

    @classmethod
    def forget(cls, app: Celery) -> None:
        """Close the app's tracker, if one was made, and drop it: the next
        :meth:`for_app` builds a new one from ``app.conf`` (what a test does between two
        configurations; ``celery_tracked.testing``)."""
        with _create_lock:
            tracker: Tracker | None = app.__dict__.pop(_ATTR, None)
        if tracker is not None:
            tracker.close()
