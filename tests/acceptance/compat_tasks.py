"""Acceptance tasks of Celery 5.7 habits a converted app relies on (issue 24, items 3, 4
and 8), added to ``tracked_app.create_app``'s app: a ``pydantic=True`` task called with
models, a task returning the ``AsyncResult``/``GroupResult`` of the canvas it started.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery, group
from pydantic import BaseModel

from celery_tracked import tracked_task


class Login(BaseModel):
    """A model with a field under a redacted name (``password``)."""

    user: str
    password: str


class Pages(BaseModel):
    count: int


def add_compat_tasks(
    app: Celery, queue: str, begin: Callable[[Any], Any], end: Callable[..., None]
) -> None:
    @tracked_task(app=app, bind=True, shared=False, name="acc.pydantic", queue=queue, pydantic=True)
    def pydantic_login(self: Any, login: Login, pages: Pages | None = None) -> Pages:
        """Receives its models (validated by Celery's wrapper on the worker)."""
        r, job_id, _, started = begin(self)
        assert isinstance(login, Login), type(login)
        r.set(f"seen:{job_id}", f"{type(login).__name__}:{login.user}:{login.password}")
        end(r, job_id, started)
        return Pages(count=(pages.count if pages is not None else 0) + 1)

    @tracked_task(app=app, bind=True, shared=False, name="acc.starts_chain", queue=queue)
    def starts_chain(self: Any, x: Any) -> Any:
        """Starts a chain of two tracked steps and returns its ``AsyncResult``."""
        r, job_id, _, started = begin(self)
        step = app.tasks["acc.succeed"]
        result = (step.si(f"{x}-1") | step.si(f"{x}-2")).apply_async()
        end(r, job_id, started)
        return result

    @tracked_task(app=app, bind=True, shared=False, name="acc.starts_group", queue=queue)
    def starts_group(self: Any, x: Any) -> Any:
        """Starts a group of two tracked steps and returns its ``GroupResult``."""
        r, job_id, _, started = begin(self)
        step = app.tasks["acc.succeed"]
        result = group(step.si(f"{x}-a"), step.si(f"{x}-b")).apply_async()
        end(r, job_id, started)
        return result
