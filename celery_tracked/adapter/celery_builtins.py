"""Celery's own tasks in an app tracked app-wide (``Celery(task_cls=TrackedTask)``).

Celery makes its built-in tasks (``celery.backend_cleanup``, ``celery.chord_unlock``,
``celery.accumulate``, ``celery.group``, ``celery.chain``, ``celery.chord``,
``celery.map``, ``celery.starmap``, ``celery.chunks``, in ``celery.app.builtins``; and
``celery.ping`` of ``celery.contrib.testing``) from the app's task class, as any
``@app.task``. Every task Celery defines itself (its name and its module under
``celery.``) stays a plain Celery task: a ``TrackedTask`` class made for one of them
makes an instance of its :func:`plain_twin` instead (same name, body and options, on
Celery's ``Task``, not on the app's ``task_cls``). Why:

- ``celery.chord_unlock`` polls a chord's header with ``self.retry()`` and no retry limit
  (``max_retries=None``) for as long as the header runs; as a tracked job its polls would
  be attempts, and the chord's body would never run once they are used up;
- they are Celery's plumbing, not the app's work: the tasks a canvas runs are tracked
  jobs already; ``celery.backend_cleanup`` is Celery's own daily Beat chore, as our
  maintenance tasks (``beat.py``) are ours.
"""

from __future__ import annotations

from typing import Any

from celery import Task

_TWIN = "_celery_tracked_plain_twin"


def is_celery_builtin(cls: type) -> bool:
    """``cls`` is the task class Celery made for a task it defines itself: its name and
    its body's module (``__module__``: ``celery.app.builtins``...) are Celery's."""
    name, module = cls.__dict__.get("name"), cls.__dict__.get("__module__")
    return all(isinstance(v, str) and v.startswith("celery.") for v in (name, module))


def plain_twin(cls: type) -> type[Task[Any, Any]] | None:
    """The plain Celery task class standing for ``cls``, a task class Celery made for a
    built-in task from an app's ``TrackedTask`` (None for any other class): the
    attributes Celery gave it (``app``, ``name``, ``run``, the decorator's options) on
    Celery's ``Task``; made once per class."""
    if not is_celery_builtin(cls):
        return None
    found = cls.__dict__.get(_TWIN)
    if found is None:
        own = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
        own = {k: v for k, v in own.items() if not k.startswith("_tracked")}
        found = type(cls.__name__, (Task,), own)
        setattr(cls, _TWIN, found)
    return found
