import celery_tracked
import celery_tracked.errors

EXPECTED = {
    "ArgumentsMismatch",
    "BulkReport",
    "Circuit",
    "CleanupReport",
    "ConfigurationError",
    "DeadlineExceeded",
    "DuplicateInCanvas",
    "EnqueueError",
    "EnqueueResult",
    "GuardError",
    "InvalidCircuit",
    "InvalidFilter",
    "InvalidPause",
    "InvalidPayload",
    "InvalidPriority",
    "InvalidSuccessor",
    "InvalidProgress",
    "InvalidTaskOption",
    "Job",
    "JobEvent",
    "JobFailed",
    "JobNotFound",
    "JobPage",
    "JobStatus",
    "KeyLifetime",
    "MaintenanceRun",
    "MissingRequired",
    "NotInAStep",
    "NotInTrackingDatabase",
    "NotTransactional",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Pause",
    "Pipeline",
    "RateLimit",
    "ReapReport",
    "TaskIdInUse",
    "RetryRefused",
    "Settings",
    "StoreError",
    "TrackedError",
    "TrackedTask",
    "TransactionFailed",
    "Tracker",
    "UnknownTask",
    "Unrecoverable",
    "WaitTimeout",
    "__version__",
    "tracked_task",
}


#: What a user writes daily: the top level's ``__all__``.
DAILY = {
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
    "Unrecoverable",
    "__version__",
    "tracked_task",
}


def test_public_names_are_pinned() -> None:
    """The top level lists what a user writes daily; every error is listed in
    ``celery_tracked.errors`` and, for compatibility, still importable from the top level
    (``EXPECTED``: every name that ever was public there)."""
    assert set(celery_tracked.__all__) == DAILY
    errors = {name for name in EXPECTED - DAILY}
    assert set(celery_tracked.errors.__all__) == errors | {"Unrecoverable"}
    for name in EXPECTED:
        assert hasattr(celery_tracked, name)
    for name in celery_tracked.errors.__all__:
        assert getattr(celery_tracked, name) is getattr(celery_tracked.errors, name)


def test_statuses() -> None:
    assert [s.value for s in celery_tracked.JobStatus] == [
        "pending",
        "processing",
        "retrying",
        "completed",
        "failed",
        "cancelled",
    ]


def test_tracked_tasks_default_to_late_acks_and_reject_on_worker_lost() -> None:
    assert celery_tracked.TrackedTask.acks_late is True
    assert celery_tracked.TrackedTask.reject_on_worker_lost is True
