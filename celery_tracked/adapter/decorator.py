"""``tracked_task``: the decorator declaring a tracked task, typed by its body.

``@tracked_task`` on ``def f(doc: str) -> int`` gives a ``TrackedTask[[str], int]``: type
checkers check the arguments of ``f.enqueue``/``f.delay``/``f.with_options(...)`` and type
``tracker.wait(f.enqueue(...))`` as ``int``. With ``bind=True`` the body's first parameter
(the task itself) is not part of the call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, cast, overload

from celery import Celery, shared_task

from ..core.options import check_task_options
from ..core.retry_policy import TRACKED_SEMANTICS
from .task import TrackedTask

P = ParamSpec("P")
R = TypeVar("R")


@overload
def tracked_task(__func: Callable[P, R]) -> TrackedTask[P, R]: ...


@overload
def tracked_task(
    *, app: Celery | None = None, bind: Literal[False] = False, **options: Any
) -> Callable[[Callable[P, R]], TrackedTask[P, R]]: ...


@overload
def tracked_task(
    *, app: Celery | None = None, bind: Literal[True], **options: Any
) -> Callable[[Callable[Concatenate[Any, P], R]], TrackedTask[P, R]]: ...


def tracked_task(
    __func: Callable[..., Any] | None = None, *, app: Celery | None = None, **options: Any
) -> Any:
    """Declare a tracked task: ``@tracked_task`` or ``@tracked_task(queue=..., ...)``.

    Tracked options: ``queue``, ``priority`` (its messages', checked against the broker's
    range at enqueue), ``job_type``, ``max_attempts``, ``backoff_ms``,
    ``idempotency_key`` (a template or callable), ``validator``, ``rate_limit_global``,
    ``concurrency_key``, ``concurrency_limit``, ``fairness_key``, ``retention`` and
    ``retry_semantics`` (see ``TrackedTask``). Unlike ``@app.task(base=TrackedTask)``,
    whose semantics are the app's (``tracked_retry_semantics``, default ``"celery"``), a
    ``tracked_task`` has the library's unless it says otherwise: every exception is retried, up to
    ``tracked_default_attempts``, with backoff (``docs/converting.md``).
    Without ``app`` it is a ``shared_task`` (bound to every app, like Celery's own);
    other keywords are Celery task options (``bind``, ``name``, ``acks_late``...).

    Raises:
        InvalidTaskOption: a tracked option is invalid (``backoff_ms="5s"``, a key
            template using attribute or index access...).
    """
    opts: dict[str, Any] = {}
    for name in ("idempotency_key", "validator", "concurrency_key", "fairness_key"):
        value = options.pop(name, None)
        if value is not None:  # a function stays a plain function on the task class
            opts[name] = (
                value if inspect.isclass(value) or not callable(value) else staticmethod(value)
            )
    for name in ("queue", "priority"):  # Celery 5.7 deprecates these task attributes
        value = options.pop(name, None)
        if value is not None:
            opts[f"tracked_{name}"] = value
    opts.update({k: v for k, v in options.items() if v is not None})
    opts.setdefault("base", TrackedTask)
    if getattr(opts["base"], "retry_semantics", None) is None:
        opts.setdefault("retry_semantics", TRACKED_SEMANTICS)  # the library's: every error
    check_task_options(opts)  # now: a shared task's class is only made when first used

    def decorate(func: Callable[..., Any]) -> TrackedTask[Any, Any]:
        factory = app.task(**opts) if app is not None else shared_task(**opts)
        return cast("TrackedTask[Any, Any]", factory(func))

    return decorate(__func) if __func is not None else decorate
