"""The running attempt on Celery's own request, for the body's calls into ``TrackedTask``.

The ``Runner`` hands the body its :class:`~celery_tracked.attempt.Attempt` as an
argument; ``TrackedTask.__call__`` keeps it on ``self.request`` while the body runs
(:func:`holding`): Celery pushes and pops that request per delivery (also in eager mode,
``apply()``), so ``self.set_progress``, ``self.then``, ``self.retry``... (:func:`part`,
:func:`attempt_of`) reach the attempt of the delivery they are called from, and nothing
outside a tracked run. Knows nothing of the features: it only holds the attempt, and the
adapter passes what a hook attached to it to the feature's functions.

Celery's request is per thread: a thread the body starts finds none. One the body starts
in its own context (``contextvars.copy_context().run``, ``asyncio.to_thread``) still
reaches the body's attempt, as it always did, through the context the body runs in
(:data:`_BODY`, read only here, and only for the task whose body it is).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from ..core.attempt import Attempt

#: The attribute of Celery's request that holds the running attempt.
ATTRIBUTE = "tracked_attempt"
#: The body's attempt in the body's context, for threads it starts in that context.
_BODY: ContextVar[Attempt | None] = ContextVar("celery_tracked_body", default=None)
T = TypeVar("T")


@contextmanager
def holding(request: Any, attempt: Attempt) -> Iterator[Attempt]:
    """``attempt`` is ``request``'s running attempt inside the block."""
    previous = getattr(request, ATTRIBUTE, None)
    setattr(request, ATTRIBUTE, attempt)
    token = _BODY.set(attempt)
    try:
        yield attempt
    finally:
        _BODY.reset(token)
        setattr(request, ATTRIBUTE, previous)


def body_call(
    request: Any, body: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Callable[[Attempt], Any]:
    """``body(*args, **kwargs)`` as the ``Runner`` calls it, given the running attempt: Celery's
    ``request.retries`` is set to the retries made before it, and the attempt is held on
    ``request`` while the body runs."""

    def call(attempt: Attempt) -> Any:
        request.retries = attempt.retries
        with holding(request, attempt):
            return body(*args, **kwargs)

    return call


def attempt_of(request: Any) -> Attempt | None:
    """The attempt whose body runs ``request``, if one does."""
    found = getattr(request, ATTRIBUTE, None)
    return found if isinstance(found, Attempt) else None


def part(request: Any, kind: type[T], task_name: str | None = None) -> T | None:
    """What a hook attached (``Attempt.attach``) to the attempt whose body runs
    ``request``: None outside a tracked run, or if no hook attached one. From a thread the
    body started in its context (no request there): its body's, if ``task_name`` (when
    given) is the body's task."""
    running = attempt_of(request)
    if running is None:
        copied = _BODY.get()
        if copied is None or task_name not in (None, copied.run.task_name):
            return None
        running = copied
    return running.part(kind)
