import celery_tracked

EXPECTED = {
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
    "NotInAStep",
    "NotInTrackingDatabase",
    "NotTransactional",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Pipeline",
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


def test_public_names_are_pinned() -> None:
    assert set(celery_tracked.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(celery_tracked, name)


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
