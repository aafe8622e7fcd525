"""The admin routes (their own bearer token): list, retry, cancel, pipeline view.

Each is one :class:`~celery_tracked.Tracker` call: ``jobs``, ``retry``, ``cancel``,
``pipeline`` (see docs/operations.md). Like the callers' routes, none shows a payload.
"""

import secrets
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException

from celery_tracked import (
    InvalidFilter,
    InvalidPayload,
    JobNotFound,
    RetryRefused,
    TrackedError,
    Tracker,
)

from .errors import Unavailable


def admin_router(tracker: Callable[[], Tracker], admin_token: str | None) -> APIRouter:
    """The ``/admin`` routes; with no ``admin_token`` every one answers 401."""

    def admin(authorization: Annotated[str | None, Header()] = None) -> None:
        scheme, _, token = (authorization or "").partition(" ")
        given = token.strip().encode()
        if (
            admin_token is None
            or scheme.lower() != "bearer"
            or not secrets.compare_digest(given, admin_token.encode())
        ):
            raise HTTPException(401, "the admin token is required")

    router = APIRouter(prefix="/admin", dependencies=[Depends(admin)])

    def call(action: Callable[[Tracker], Any]) -> Any:
        try:
            return action(tracker())
        except JobNotFound:
            raise HTTPException(404, "no such job") from None
        except (InvalidFilter, InvalidPayload) as exc:
            raise HTTPException(400, str(exc)) from None
        except RetryRefused as exc:
            raise HTTPException(409, str(exc)) from None
        except TrackedError as exc:
            raise Unavailable from exc

    @router.get("/jobs")
    def list_jobs(
        status: str | None = None,
        queue: str | None = None,
        owner_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        filters: dict[str, Any] = {
            k: v
            for k, v in (("status", status), ("queue", queue), ("owner_id", owner_id))
            if v is not None
        }
        page = call(lambda t: t.jobs(limit=limit, cursor=cursor, **filters))
        return {"jobs": [summary(job) for job in page], "next_cursor": page.next_cursor}

    @router.post("/jobs/{job_id}/retry")
    def retry(job_id: str) -> dict[str, bool]:
        if not call(lambda t: t.retry(job_id)):
            raise HTTPException(409, "only a failed or cancelled job can be retried")
        return {"retried": True}

    @router.post("/jobs/{job_id}/cancel")
    def cancel(job_id: str, running: bool = False) -> dict[str, bool]:
        if call(lambda t: t.get_job(job_id)) is None:
            raise HTTPException(404, "no such job")
        if not call(lambda t: t.cancel(job_id, "cancelled by an admin", running=running)):
            raise HTTPException(409, "this job cannot be cancelled in its status")
        return {"cancelled": True}

    @router.get("/pipelines/{correlation_id}")
    def pipeline(correlation_id: str) -> dict[str, Any]:
        found = call(lambda t: t.pipeline(correlation_id))
        return {
            "correlation_id": found.correlation_id,
            "state": found.state,
            "counts": found.counts,
            "jobs": [summary(job) for job in found.jobs],
        }

    return router


def summary(job: Any) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "parent_job_id": job.parent_job_id,
        "owner_id": job.owner_id,
        "queue": job.queue_name,
        "type": job.job_type,
        "status": job.status.value,
        "attempts": job.attempts_made,
        "progress": job.progress,
        "stage": job.stage,
        "error_type": job.error_type,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at and job.finished_at.isoformat(),
    }
