"""The running attempt on Celery's own request, for the body's calls into ``TrackedTask``.

The ``Runner`` hands the body its :class:`~celery_tracked.attempt.Attempt` as an
argument; ``TrackedTask.__call__`` keeps it on ``self.request`` while the body runs
(:func:`holding`): Celery pushes and pops that request per delivery (also in eager mode,
``apply()``) and per thread, so ``self.set_progress``, ``self.then``, ``self.retry``...
(:func:`attempt_of`) reach the attempt of the delivery they are called from, and nothing
outside a tracked run. Knows nothing of the features: it only holds the attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from .attempt import Attempt

#: The attribute of Celery's request that holds the running attempt.
ATTRIBUTE = "tracked_attempt"
T = TypeVar("T")


@contextmanager
def holding(request: Any, attempt: Attempt) -> Iterator[Attempt]:
    """``attempt`` is ``request``'s running attempt inside the block."""
    previous = getattr(request, ATTRIBUTE, None)
    setattr(request, ATTRIBUTE, attempt)
    try:
        yield attempt
    finally:
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


def part(request: Any, kind: type[T]) -> T | None:
    """What a hook attached (``Attempt.attach``) to the attempt whose body runs
    ``request``: None outside a tracked run, or if no hook attached one."""
    running = attempt_of(request)
    return None if running is None else running.part(kind)
