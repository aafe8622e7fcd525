"""The tracked options of a task, checked once when its class is made.

``@tracked_task(...)``, ``@app.task(base=TrackedTask, ...)`` and ``class X(TrackedTask)``
all end in a new ``TrackedTask`` subclass (Celery builds decorated tasks with ``type()``),
so ``TrackedTask.__init_subclass__`` checks them here: a bad value is refused at
decoration with :class:`~celery_tracked.errors.InvalidTaskOption`, never met by a worker
halfway through a job. Pure: no Celery, Redis or SQL.

The options (``None``: the default):
    tracked_queue: the queue jobs are sent to unless the call names one
        (``tracked_task(queue=...)`` sets it; ``task_routes`` work as usual).
    job_type: logical type, default the task name; idempotency keys are unique per type.
    max_attempts: attempts before ``failed`` (default ``tracked_default_attempts``).
    backoff_ms: base of the exponential backoff, an integer of milliseconds (default
        ``tracked_default_backoff_ms``).
    idempotency_key: a ``str.format`` template over the call's arguments
        (``"ocr:{document_id}"``) or a callable taking the call's arguments.
    validator: a pydantic model class (validated against the named arguments) or a
        callable taking the named arguments that raises to refuse them.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Mapping
from typing import Any

from .errors import InvalidTaskOption

#: The class attributes of ``TrackedTask`` that are tracked options.
TRACKED_OPTIONS = (
    "job_type",
    "tracked_queue",
    "max_attempts",
    "backoff_ms",
    "idempotency_key",
    "validator",
)


def _unwrap(value: Any) -> Any:
    return value.__func__ if isinstance(value, staticmethod | classmethod) else value


def _integer(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        unit = " (milliseconds)" if name == "backoff_ms" else ""
        raise InvalidTaskOption(name, f"must be {kind}{unit}, got {value!r}")


def _text(name: str, value: Any) -> None:
    text = getattr(value, "name", value) if name == "tracked_queue" else value
    if not isinstance(text, str) or not text.strip():
        raise InvalidTaskOption(name, f"must be a non-empty string, got {value!r}")


def _key(name: str, value: Any) -> None:
    if callable(value):
        return
    if not isinstance(value, str) or not value:
        raise InvalidTaskOption(name, f"must be a str.format template or a callable, got {value!r}")
    try:
        list(string.Formatter().parse(value))
    except ValueError as exc:
        raise InvalidTaskOption(name, f"is not a valid template {value!r}: {exc}") from None


def _validator(name: str, value: Any) -> None:
    if inspect.isclass(value) and not hasattr(value, "model_validate"):
        raise InvalidTaskOption(name, f"a class must be a pydantic model, got {value!r}")
    if not callable(value):
        raise InvalidTaskOption(
            name, f"must be a pydantic model class or a callable, got {value!r}"
        )


_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "job_type": _text,
    "tracked_queue": _text,
    "max_attempts": lambda n, v: _integer(n, v, 1),
    "backoff_ms": lambda n, v: _integer(n, v, 0),
    "idempotency_key": _key,
    "validator": _validator,
}


def check_task_options(options: Mapping[str, Any]) -> None:
    """Refuse a bad tracked option among ``options`` (a class ``__dict__`` or the keywords
    of ``tracked_task``); None means "the default" and is always accepted.

    Raises:
        InvalidTaskOption: names the option and what it must be.
    """
    for name, check in _CHECKS.items():
        value = _unwrap(options.get(name))
        if value is not None:
            check(name, value)
