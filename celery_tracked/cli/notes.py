"""What ``tracked show`` adds to a job's row, in words: why a failed job was not retried
(the reason its worker recorded with the failure, from its task's policy; for a row
without one, its task's ``autoretry_for``, ``dont_autoretry_for``, or ``Unrecoverable``),
and the state of a running job's lease, judged on the database's clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..core.jobs import Job, JobEvent, JobStatus
from ..core.outcomes import NOT_RETRIED
from ..core.retry_policy import RetryPolicy
from ..services.bulk import unrecoverable
from .render import Cell


def _names(errors: tuple[type[BaseException], ...]) -> set[str]:
    return {error.__name__ for error in errors}


def retry_note(job: Job, app: Any, events: Sequence[JobEvent] = ()) -> str | None:
    """For a ``failed`` job that stopped before its last attempt: why its error was not
    retried (the reason its last ``failed`` event in ``events`` records; else from its
    task's declaration when this app knows the task), else None."""
    if job.status is not JobStatus.FAILED or job.retries_exhausted:
        return None
    if job.attempts_made >= job.max_attempts or not unrecoverable(job):
        return None
    failed = [e.message or "" for e in events if e.event == JobStatus.FAILED.value]
    marker = f"; {NOT_RETRIED}"
    if failed and marker in failed[-1]:  # the worker's note comes last, after the error
        return f"  ({NOT_RETRIED}{failed[-1].rpartition(marker)[2]})"
    task = getattr(app, "tasks", {}).get(job.task_name)
    policy = getattr(getattr(task, "description", None), "retry", None)
    error = job.error_type or "its error"
    if isinstance(policy, RetryPolicy):
        if policy.retry_on == () and policy.semantics == "celery":
            return (
                f"  (not retried: its task does not retry {error}: under Celery's retry "
                "semantics, only self.retry and autoretry_for retry)"
            )
        if policy.retry_on == ():
            return "  (not retried: its task declares autoretry_for=(), no error is retried)"
        if error in _names(policy.never_retry):
            return f"  (not retried: {error} is in its task's dont_autoretry_for)"
        if policy.retry_on is not None and error not in _names(policy.retry_on):
            return f"  (not retried: {error} is not in its task's autoretry_for)"
    return f"  (not retried: {error} ended it: Unrecoverable, or an error its task does not retry)"


def lease_fields(job: Job, db_now: datetime | None) -> list[tuple[str, Cell]]:
    """A ``processing`` job's lease line, seen at ``db_now`` (the database's clock)."""
    if job.status is not JobStatus.PROCESSING or db_now is None:
        return []
    until = job.locked_until
    if until is None:
        return [("lease", ("released: its run is gone", "failed"))]
    left = (until - db_now).total_seconds()
    if left < 0:
        ago = f"lease expired {int(-left)} s ago (on the database's clock): its run is gone"
        return [("lease", (ago, "failed"))]
    return [("lease", f"held by {job.locked_by or '-'}, {int(left)} s left")]
