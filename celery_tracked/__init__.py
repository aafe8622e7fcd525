"""celery-tracked: durable job tracking and idempotency for any Celery app."""

from . import signals as _signals  # noqa: F401 (connects the worker's handlers)
from .celery_tracker import Tracker
from .cleanup import CleanupReport
from .decorator import tracked_task
from .errors import (
    ConfigurationError,
    DuplicateInCanvas,
    EnqueueError,
    GuardError,
    InvalidFilter,
    InvalidPayload,
    InvalidProgress,
    InvalidSuccessor,
    InvalidTaskOption,
    JobFailed,
    JobNotFound,
    NotInAStep,
    PayloadNotSerializable,
    PayloadTooLarge,
    RetryRefused,
    StoreError,
    TrackedError,
    Unrecoverable,
    WaitTimeout,
)
from .finder import BulkReport, JobPage
from .jobs import EnqueueResult, Job, JobEvent, JobStatus
from .keys import KeyLifetime
from .pipelines import Pipeline
from .reaper import ReapReport
from .settings import Settings
from .task import TrackedTask

__version__ = "0.1.0"

__all__ = [
    "BulkReport",
    "CleanupReport",
    "ConfigurationError",
    "DuplicateInCanvas",
    "EnqueueError",
    "EnqueueResult",
    "GuardError",
    "InvalidFilter",
    "InvalidPayload",
    "InvalidProgress",
    "InvalidSuccessor",
    "InvalidTaskOption",
    "Job",
    "JobEvent",
    "JobFailed",
    "JobNotFound",
    "JobPage",
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
