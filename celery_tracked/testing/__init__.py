"""Testing tracked tasks: a pytest plugin and the helpers it is made of (docs/testing.md).

The plugin (``celery_tracked.testing.plugin``) is registered through the ``pytest11``
entry point: installing celery-tracked with pytest is enough. Importing this package
does not import pytest (``import celery_tracked`` does not import this package).
"""

from __future__ import annotations

from .apps import MEMORY, SQLITE, purge_queues, tracked_settings, tracked_test_app
from .helpers import OPEN, TrackedTesting

__all__ = [
    "MEMORY",
    "OPEN",
    "SQLITE",
    "TrackedTesting",
    "purge_queues",
    "tracked_settings",
    "tracked_test_app",
]
