"""The HTTP API: submit a job, poll it; the admin routes are in :mod:`.admin`.

- ``POST /jobs/{queue}``: 202 ``{job_id, status, created}`` for a new job; with an
  ``Idempotency-Key`` header already used by this caller, 200 and the same job
  (``created=false``); every key is scoped to the caller (:mod:`.keys`): without a header,
  an OCR job's key is the caller's and the document's, never shared with another caller;
  400 for an unknown queue or an invalid body (nothing created), a body nested too deep
  included; 413 for a body over 1 MiB (:mod:`.limits`, never read whole); 429
  over the caller's per-minute limit (``Retry-After``: the seconds to the next minute);
  503, with a generic message, when the broker, Redis or the database does not answer.
- ``GET /jobs/{job_id}``: the job's status, timestamps, attempts, progress and stage,
  never its payload; for a pipeline's first step (a course's outline), ``pipeline``: the
  whole pipeline's state, counts and steps
  (``Tracker.pipeline``; the later steps carry the same owner); 404 when no job has
  this id or it belongs to another caller.
- ``POST /documents``: 201 ``{document_id}``, a document (owned by the caller) for the
  ``ocr``, ``ai`` and ``indexing`` jobs; 409 when the id exists; 422 for an invalid body.

Callers authenticate with ``Authorization: Bearer <token>``; the token maps to the user id
stored as the job's ``owner_id``.
"""

import json
import logging
import time
import uuid
from typing import Annotated, Any

import redis
from celery import Celery
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from celery_tracked import InvalidPayload, Job, JobNotFound, Pipeline, TrackedError, Tracker

from .admin import admin_router
from .bodies import BODIES, NewDocument
from .celery_app import create_celery, processors
from .config import ServiceConfig
from .errors import UNAVAILABLE, Unavailable
from .keys import rate_key, scoped_key
from .limits import TOO_LARGE, BodyLimit, BodyTooLarge
from .storage import Documents, engine_for

MAX_KEY = 200

log = logging.getLogger(__name__)


def bearer(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def job_view(job: Job) -> dict[str, Any]:
    """What a caller sees of its job: never the payload (nor the result)."""
    return {
        "job_id": job.id,
        "queue": job.queue_name,
        "type": job.job_type,
        "status": job.status.value,
        "attempts": job.attempts_made,
        "max_attempts": job.max_attempts,
        "progress": job.progress,
        "stage": job.stage,
        "error_type": job.error_type,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at and job.started_at.isoformat(),
        "finished_at": job.finished_at and job.finished_at.isoformat(),
        "updated_at": job.updated_at.isoformat(),
    }


def pipeline_view(pipeline: Pipeline | None) -> dict[str, Any] | None:
    """A pipeline's overall state and its steps, as its first step's owner sees them."""
    if pipeline is None:
        return None
    steps = [
        {
            "job_id": job.id,
            "parent_job_id": job.parent_job_id,
            "type": job.job_type,
            "status": job.status.value,
            "progress": job.progress,
            "stage": job.stage,
        }
        for job in pipeline.jobs
    ]
    return {"state": pipeline.state, "counts": pipeline.counts, "steps": steps}


class Service:
    """The API's dependencies: the Celery app, its tracker and the limiter's Redis."""

    def __init__(self, config: ServiceConfig, celery: Celery) -> None:
        self.config = config
        self.celery = celery
        self.tasks = processors(celery)
        self.redis = redis.Redis.from_url(
            config.redis_url, socket_timeout=2, socket_connect_timeout=2
        )
        self.documents = Documents(engine_for(config.database_url))

    def tracker(self) -> Tracker:
        try:
            return Tracker.for_app(self.celery)
        except TrackedError as exc:
            raise Unavailable from exc

    def check_rate(self, user: str) -> None:
        """A fixed window per caller and minute: one ``INCR`` (and ``EXPIRE``) in Redis."""
        now = time.time()
        key = rate_key(user, int(now // 60))
        try:
            pipe = self.redis.pipeline()
            pipe.incr(key)
            pipe.expire(key, 120)
            count = pipe.execute()[0]
        except redis.RedisError as exc:
            # one line, like the broker's and the database's: the error's type, no URL
            log.error("the rate limiter's Redis did not answer (%s): 503", type(exc).__name__)
            raise Unavailable from exc
        if count > self.config.rate_limit_per_minute:
            retry_after = str(60 - int(now) % 60)  # the seconds left in this window
            raise HTTPException(
                429,
                "too many jobs submitted; try again in a minute",
                headers={"Retry-After": retry_after},
            )

    def submit(self, queue: str, kwargs: dict[str, Any], user: str, key: str | None) -> Any:
        task = self.tasks[queue]
        if queue == "notification":
            kwargs = {**kwargs, "user_id": user}
        if key is not None:
            key = scoped_key(user, "key", key)
        elif queue == "ocr":  # one OCR job per caller and document (not per document)
            key = scoped_key(user, "ocr", kwargs["document_id"])
        try:
            return task.with_options(owner_id=user, idempotency_key=key)(**kwargs)
        except InvalidPayload as exc:
            raise HTTPException(400, "invalid job body") from exc
        except TrackedError as exc:
            raise Unavailable from exc

    def close(self) -> None:
        """Close the tracker's and the limiter's connections (the app stays usable)."""
        Tracker.for_app(self.celery).close()
        self.redis.close()
        self.documents.engine.dispose()

    def add_document(self, document: NewDocument, user: str) -> None:
        try:
            self.documents.add(document.document_id, user, document.body)
        except IntegrityError:
            raise HTTPException(409, "a document with this id exists") from None
        except SQLAlchemyError as exc:
            raise Unavailable from exc

    def get(self, job_id: str) -> Job | None:
        try:
            return self.tracker().get_job(job_id)
        except TrackedError as exc:
            raise Unavailable from exc

    def pipeline_of(self, job: Job) -> Pipeline | None:
        """The pipeline ``job`` starts (its id is the correlation id), else None."""
        if job.correlation_id not in (None, job.id):
            return None  # a later step: the first step's owner sees the pipeline
        try:
            return self.tracker().pipeline(job.id)
        except JobNotFound:
            return None
        except TrackedError as exc:
            raise Unavailable from exc


def create_api(config: ServiceConfig, celery: Celery | None = None) -> FastAPI:
    """The FastAPI app on ``config`` (and ``celery``, built from ``config`` if not given)."""
    service = Service(config, celery or create_celery(config))
    api = FastAPI(title="celery-tracked example service")
    api.state.service = service
    api.add_middleware(BodyLimit)

    @api.exception_handler(Unavailable)
    async def unavailable(request: Request, exc: Unavailable) -> JSONResponse:
        return JSONResponse({"detail": UNAVAILABLE}, status_code=503)

    @api.exception_handler(BodyTooLarge)
    async def too_large(request: Request, exc: BodyTooLarge) -> JSONResponse:
        return JSONResponse({"detail": TOO_LARGE}, status_code=413)  # (BodyLimit answered)

    def caller(authorization: Annotated[str | None, Header()] = None) -> str:
        user = config.api_tokens.get(bearer(authorization) or "")
        if user is None:
            raise HTTPException(401, "a valid bearer token is required")
        return user

    @api.post("/jobs/{queue}", status_code=202)
    async def submit(
        queue: str,
        request: Request,
        user: Annotated[str, Depends(caller)],
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        model = BODIES.get(queue)
        if model is None:
            raise HTTPException(400, f"unknown queue; one of {sorted(BODIES)}")
        if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY:
            raise HTTPException(400, f"Idempotency-Key must have 1 to {MAX_KEY} characters")
        try:
            body = model.model_validate(json.loads(await request.body() or b"null"))
        except (ValueError, ValidationError, RecursionError) as exc:  # nested too deep: 400
            errors = (
                exc.errors(include_input=False, include_url=False, include_context=False)
                if isinstance(exc, ValidationError)
                else []
            )
            return JSONResponse({"detail": "invalid job body", "errors": errors}, 400)
        await run_in_threadpool(service.check_rate, user)
        result = await run_in_threadpool(
            service.submit, queue, body.model_dump(), user, idempotency_key
        )
        answer = {"job_id": result.job_id, "status": result.status.value, "created": result.created}
        return JSONResponse(answer, status_code=202 if result.created else 200)

    @api.post("/documents", status_code=201)
    async def add_document(
        document: NewDocument, user: Annotated[str, Depends(caller)]
    ) -> dict[str, str]:
        await run_in_threadpool(service.add_document, document, user)
        return {"document_id": document.document_id}

    @api.get("/jobs/{job_id}")
    async def get_job(job_id: str, user: Annotated[str, Depends(caller)]) -> dict[str, Any]:
        try:
            uuid.UUID(job_id)
        except ValueError:
            raise HTTPException(404, "no such job") from None
        job = await run_in_threadpool(service.get, job_id)
        if job is None or job.owner_id != user:
            raise HTTPException(404, "no such job")  # another caller's job is not revealed
        pipeline = await run_in_threadpool(service.pipeline_of, job)
        return {**job_view(job), "pipeline": pipeline_view(pipeline)}

    api.include_router(admin_router(service.tracker, config.admin_token))
    return api
