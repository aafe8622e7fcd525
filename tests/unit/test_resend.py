"""What ``Tracker.retry`` sends from a process that may not know the task (issue 12, item
7): reprs from the row's redacted payload, the attempts its latest round was given, and the
arguments of a task not registered here checked like any other. Pure: no service."""

from __future__ import annotations

import pytest

from celery_tracked import RetryRefused
from celery_tracked.core.codec import encode
from celery_tracked.core.jobs import JobStatus
from celery_tracked.core.redact import REDACTED, Redaction
from celery_tracked.services.rerun import granted, retry_arguments, stored_reprs
from tests.unit.job_rows import a_job

KEYS = ("password", "token", "api_key")


def test_reprs_come_from_the_rows_redacted_payload() -> None:
    payload = {"args": ["a", REDACTED], "kwargs": {"api_key": REDACTED, "n": 2}}
    job = a_job(payload_json=encode(payload))
    assert stored_reprs(job) == ("('a', '[redacted]')", "{'api_key': '[redacted]', 'n': 2}")
    assert stored_reprs(a_job(payload_json=None)) == ("()", "{}")


def test_a_long_payloads_reprs_are_bounded() -> None:
    job = a_job(payload_json=encode({"args": ["x" * 5000], "kwargs": {}}))
    argsrepr, _ = stored_reprs(job)
    assert len(argsrepr) <= 1100


@pytest.mark.parametrize(
    ("max_attempts", "rounds", "expected"),
    [
        (3, [], 3),  # never retried: what it was enqueued with
        (5, [("retried", 3)], 2),  # retried after 3 attempts with 2 more
        (7, [("retried", 3), ("retried", 5)], 2),
        # an undone retry restored max_attempts: the round before it counts
        (3, [("retried", 3), ("retry_undone", 3)], 3),
        (5, [("retried", 3), ("retried", 3), ("retry_undone", 3)], 2),
        (1, [("retried", 4)], 1),  # never less than one
        (3, [("retry_undone", 3)], 3),  # an undo without its retry (history cleaned)
    ],
)
def test_the_attempts_its_latest_round_was_given(
    max_attempts: int, rounds: list[tuple[str, int]], expected: int
) -> None:
    assert granted(max_attempts, rounds) == expected


def test_keyword_secrets_of_a_task_not_registered_here_are_checked_too() -> None:
    """Without the task, keyword arguments are still redacted by name and compared with
    the stored payload: only their secret parts may differ."""
    stored = {"args": ["a"], "kwargs": {"options": {"token": REDACTED, "depth": 2}}}
    failed = a_job(status=JobStatus.FAILED, payload_json=encode(stored))
    given = {"options": {"token": "t-1", "depth": 2}}
    assert retry_arguments(failed, None, given, Redaction(KEYS)) == (["a"], given)
    with pytest.raises(RetryRefused, match="differ from its stored arguments"):
        retry_arguments(failed, None, {"options": {"token": "t-1", "depth": 3}}, Redaction(KEYS))
