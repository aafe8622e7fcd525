"""celery-tracked: durable job tracking and idempotency for any Celery app.

``__all__`` is what a user writes daily; the errors are in ``celery_tracked.errors`` (each
still importable from here), the hook interface in ``celery_tracked.hooks``.
"""

from .adapter import signals as _signals  # noqa: F401 (connects the worker's handlers)
from .adapter.celery_tracker import Tracker
from .adapter.decorator import tracked_task
from .adapter.task import TrackedTask
from .core.bulk import BulkReport
from .core.circuits import Circuit
from .core.finder import JobPage
from .core.jobs import EnqueueResult, Job, JobEvent, JobStatus
from .core.keys import KeyLifetime
from .core.maintenance import MaintenanceRun
from .core.pauses import Pause
from .core.pipelines import Pipeline
from .core.rates import RateLimit
from .core.settings import Settings
from .errors import *  # noqa: F403 (every error, for compatibility)
from .errors import Unrecoverable
from .services.cleanup import CleanupReport
from .services.reaper import ReapReport

__version__ = "0.1.0"

__all__ = [
    "BulkReport",
    "Circuit",
    "CleanupReport",
    "EnqueueResult",
    "Job",
    "JobEvent",
    "JobPage",
    "JobStatus",
    "KeyLifetime",
    "MaintenanceRun",
    "Pause",
    "Pipeline",
    "RateLimit",
    "ReapReport",
    "Settings",
    "TrackedTask",
    "Tracker",
    "Unrecoverable",  # the one error a body raises daily (all: celery_tracked.errors)
    "__version__",
    "tracked_task",
]
