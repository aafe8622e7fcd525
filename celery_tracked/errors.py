"""Every error celery-tracked raises (``from celery_tracked.errors import JobNotFound``).

Their home is ``core/errors.py``. Each is also importable from the top level
(``from celery_tracked import Unrecoverable``), for compatibility and because a body raises
``Unrecoverable`` daily, but the top-level ``__all__`` lists only what a user writes every
day; the errors are listed here.
"""

from .core.errors import (
    ArgumentsMismatch,
    ConfigurationError,
    DeadlineExceeded,
    DuplicateInCanvas,
    EnqueueError,
    GuardError,
    InvalidFilter,
    InvalidPause,
    InvalidPayload,
    InvalidPriority,
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

__all__ = [
    "ArgumentsMismatch",
    "ConfigurationError",
    "DeadlineExceeded",
    "DuplicateInCanvas",
    "EnqueueError",
    "GuardError",
    "InvalidFilter",
    "InvalidPause",
    "InvalidPayload",
    "InvalidPriority",
    "InvalidProgress",
    "InvalidSuccessor",
    "InvalidTaskOption",
    "JobFailed",
    "JobNotFound",
    "NotInAStep",
    "NotInTrackingDatabase",
    "NotTransactional",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "RetryRefused",
    "StoreError",
    "TaskIdInUse",
    "TrackedError",
    "TransactionFailed",
    "UnknownTask",
    "Unrecoverable",
    "WaitTimeout",
]
