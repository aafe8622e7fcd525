"""Public import path of the running attempt a hook is given
(``celery_tracked.attempt.Attempt``, as docs/usage.md shows): its home is
``core/attempt.py``."""

from .core.attempt import Attempt

__all__ = ["Attempt"]
