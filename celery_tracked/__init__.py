"""celery-tracked: durable job tracking and idempotency for any Celery app."""

from .adapter import signals as _signals  # noqa: F401 (connects the worker's handlers)
from .adapter.celery_tracker import Tracker
from .adapter.decorator import tracked_task
from .adapter.task import TrackedTask
from .core.errors import (
    ArgumentsMismatch,
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
    NotInTrackingDatabase,
    NotTransactional,
    PayloadNotSerializable,
    PayloadTooLarge,
    RetryRefused,
    StoreError,
    TaskIdInUse,
    TrackedError,
    TransactionFailed,
    UnknownTask,
    Unrecoverable,
    WaitTimeout,
)
from .core.finder import BulkReport, JobPage
from .core.jobs import EnqueueResult, Job, JobEvent, JobStatus
from .core.keys import KeyLifetime
from .core.pipelines import Pipeline
from .core.settings import Settings
from .services.cleanup import CleanupReport
from .services.reaper import ReapReport

__version__ = "0.1.0"

__all__ = [
    "ArgumentsMismatch",
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
    "NotInTrackingDatabase",
    "NotTransactional",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Pipeline",
    "ReapReport",
    "RetryRefused",
    "Settings",
    "StoreError",
    "TaskIdInUse",
    "TrackedError",
    "TrackedTask",
    "Tracker",
    "TransactionFailed",
    "UnknownTask",
    "Unrecoverable",
    "WaitTimeout",
    "__version__",
    "tracked_task",
]
