"""celery-tracked: durable job tracking and idempotency for any Celery app."""

from . import signals as _signals  # noqa: F401 (connects the worker's handlers)
from .cleanup import CleanupReport
from .decorator import tracked_task
from .errors import (
    ConfigurationError,
    DuplicateInCanvas,
    EnqueueError,
    InvalidPayload,
    InvalidProgress,
    InvalidTaskOption,
    JobFailed,
    JobNotFound,
    PayloadNotSerializable,
    PayloadTooLarge,
    RetryRefused,
    StoreError,
    TrackedError,
    Unrecoverable,
    WaitTimeout,
)
from .guard import GuardError
from .jobs import EnqueueResult, Job, JobEvent, JobStatus
from .keys import KeyLifetime
from .pipelines import Pipeline
from .reaper import ReapReport
from .settings import Settings
from .successors import InvalidSuccessor, NotInAStep
from .task import TrackedTask
from .tracker import Tracker

__version__ = "0.1.0"

__all__ = [
    "CleanupReport",
    "ConfigurationError",
    "DuplicateInCanvas",
    "EnqueueError",
    "EnqueueResult",
    "GuardError",
    "InvalidPayload",
    "InvalidProgress",
    "InvalidSuccessor",
    "InvalidTaskOption",
    "Job",
    "JobEvent",
    "JobFailed",
    "JobNotFound",
    "JobStatus",
    "KeyLifetime",
    "NotInAStep",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Pipeline",
    "ReapReport",
    "RetryRefused",
    "Settings",
    "StoreError",
    "TrackedError",
    "TrackedTask",
    "Tracker",
    "Unrecoverable",
    "WaitTimeout",
    "__version__",
    "tracked_task",
]
