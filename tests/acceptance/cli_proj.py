"""The app of test_cli_ops.py: tasks whose failures ``tracked show`` explains, and a
fan-out pipeline. Its database is ``CELERY_TRACKED_DATABASE_URL``; it sets no Redis URL
(an ops host that reaches the database only)."""

from __future__ import annotations

from typing import Any

from celery import Celery

from celery_tracked import Unrecoverable, tracked_task

app = Celery("cli_proj", broker="memory://", set_as_current=False)


@tracked_task(app=app, shared=False, name="ops.strict", autoretry_for=())
def strict(message: str) -> None:
    raise ValueError(message)


@tracked_task(app=app, shared=False, name="ops.picky", autoretry_for=(ConnectionError,))
def picky(message: str) -> None:
    raise KeyError(message)


@tracked_task(app=app, shared=False, name="ops.gone")
def gone(message: str) -> None:
    raise Unrecoverable(message)


@tracked_task(app=app, shared=False, name="ops.down", max_attempts=1)
def down(message: str) -> None:
    raise ConnectionError(message)


@tracked_task(app=app, shared=False, name="ops.leaf")
def leaf(n: int) -> int:
    return n


@tracked_task(app=app, bind=True, shared=False, name="ops.fan")
def fan(self: Any, width: int) -> None:
    for n in range(width):
        self.then(leaf, n)
