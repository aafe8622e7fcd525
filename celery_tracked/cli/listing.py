"""``celery tracked jobs`` / ``show`` / ``pipeline``: reading jobs (never their payload or
result)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click
from celery.bin.base import CeleryCommand

from ..core.jobs import CLAIMABLE, Job, JobEvent, JobStatus
from ..core.pauses import HELD_BY_PAUSE, Pause, holding
from . import common, notes
from .common import NotFound, check_text, emit_json, friendly, reader_of
from .common import style as output_style
from .group import tracked
from .render import (
    JOB_HEADERS,
    Cell,
    clip,
    duration,
    event_dict,
    fields,
    job_dict,
    job_rows,
    relative,
    table,
)


@tracked.command(cls=CeleryCommand)
@common.filter_options
@click.option("--limit", default=50, show_default=True, help="Jobs per page (1-1000).")
@click.option("--cursor", default=None, help="The next page: a listing's next cursor.")
@common.json_option
@click.pass_context
def jobs(
    ctx: click.Context, /, limit: int, cursor: str | None, as_json: bool, **options: Any
) -> None:
    """List jobs, newest first, by filters; a page at a time (--cursor).

    \b
    celery -A proj tracked jobs --status failed --created-after 1d
    celery -A proj tracked jobs --queue emails --status pending,retrying --json
    """
    tracker = reader_of(ctx)
    with friendly("listing jobs"):
        page = tracker.jobs(limit=limit, cursor=cursor, **common.filters_from(options))
        now = tracker.celery_side.clock()  # the database's: ages are judged on it
    if as_json:
        emit_json({"jobs": [job_dict(j) for j in page.jobs], "next_cursor": page.next_cursor})
        return
    if not page.jobs:
        click.echo("no jobs match")
        return
    click.echo(table(JOB_HEADERS, job_rows(page.jobs, now), output_style()))
    if page.next_cursor:
        click.echo(f"\nmore: add --cursor {page.next_cursor}")


@tracked.command(cls=CeleryCommand)
@click.argument("job_id")
@click.option("--history/--no-history", default=True, help="Show the job's events.")
@common.json_option
@click.pass_context
def show(ctx: click.Context, job_id: str, history: bool, as_json: bool) -> None:
    """Show one job (with its progress and stage, never its payload or result) and its
    history (the body's ``self.log`` lines included, event ``log``)."""
    check_text("JOB_ID", job_id)
    tracker = reader_of(ctx)
    with friendly("reading the job"):
        job = tracker.get_job(job_id)
        events = tracker.history(job_id) if job is not None else []  # the note reads them
        now = tracker.celery_side.clock()  # the database's: ages are judged on it
        if job is None:
            raise NotFound(f"no job {job_id}")  # shown escaped (``common._Shown``)
        paused = _paused_hold(job)
        looks = paused or _scheduled_hold(job)  # a pause covering it holds it longer
        pause = holding(tracker.paused(), job.queue_name, job.job_type) if looks else None
    held = _hold_text(job, paused, pause)
    if as_json:
        out = job_dict(job)
        out["held"] = held
        out["history"] = [event_dict(e) for e in events] if history else None
        emit_json(out)
        return
    style = output_style()
    note = notes.retry_note(job, ctx.obj.app, events)
    click.echo(fields(_job_fields(job, note, now, held), style))
    if history:
        click.echo("")
        click.echo(table(EVENT_HEADERS, _event_rows(events), style))


EVENT_HEADERS = ("AT", "EVENT", "STATUS", "ATTEMPT", "DURATION", "MESSAGE")


def _job_fields(
    job: Job, retry_note: str | None, now: datetime, held: str | None = None
) -> list[tuple[str, Cell]]:
    """The job's fields, ages seen at ``now`` (the database's clock); ``held``: why it
    waits in the database without a message (a pause, or its due time), if it does."""

    def at(when: Any) -> str:
        return "-" if when is None else f"{when.isoformat()}  ({relative(when, now)})"

    error = f"{job.error_type}: {job.error_message}" if job.error_type else "-"
    pairs: list[tuple[str, Cell]] = [
        ("id", job.id),
        ("status", (job.status.value, job.status.value)),
        ("queue", job.queue_name),
        ("job type", job.job_type),
        ("task", job.task_name),
        ("priority", "-" if job.priority is None else str(job.priority)),
        ("attempts", f"{job.attempts_made}/{job.max_attempts}" + (retry_note or "")),
        ("progress", f"{job.progress}%" + (f"  {job.stage}" if job.stage else "")),
        ("error", (error, "failed" if job.error_type else None)),
        ("created", at(job.created_at)),
        *_due_fields(job, at(job.due_at), held),
        ("deadline", at(job.deadline_at)),
        ("started", at(job.started_at)),
        ("finished", at(job.finished_at)),
        ("duration", duration(None if job.duration_ms is None else job.duration_ms / 1000)),
        ("worker", job.worker or "-"),
        *notes.lease_fields(job, now),
        ("correlation id", job.correlation_id or "-"),
        ("parent job", job.parent_job_id or "-"),
        ("owner", job.owner_id or "-"),
        ("tenant", job.tenant or "-"),
        ("idempotency key", job.idempotency_key or "-"),
    ]
    if job.cancel_requested_at is not None:
        pairs.append(("cancel requested", (at(job.cancel_requested_at), "cancelled")))
    return pairs


def _due_fields(job: Job, due: str, held: str | None) -> list[tuple[str, Cell]]:
    """Its due time, and whether it is held in the database: by a pause (a row of its
    own: which pause, who, since when, why), or until due (after the due time)."""
    if held is None:
        return [("due", due)]
    if _paused_hold(job):
        return [("due", due), ("held", (held, "pending"))]
    return [("due", f"{due}  held: {held}")]


def _paused_hold(job: Job) -> bool:
    """A waiting job a pause held in the database (``HOLD``: no message, marked)."""
    return job.status in CLAIMABLE and job.locked_by == HELD_BY_PAUSE and not job.published_at


def _hold_text(job: Job, paused: bool, pause: Pause | None) -> str | None:
    """Why the job waits in the database without a message: a pause (which one, who, when,
    why; or lifted, the relay publishing it), or its due time (the scheduler pass; and a
    pause covering it, which it waits for too)."""
    if paused:
        if pause is None:
            return "by a pause, now lifted: the relay publishes it (resume, or its next pass)"
        return f"by a pause ({pause.describe()}): published on resume"
    if not _scheduled_hold(job):
        return None
    if pause is not None:
        return f"published by the scheduler pass once resumed ({pause.describe()})"
    return "published by the scheduler pass"


def _scheduled_hold(job: Job) -> bool:
    """A pending job held in the database until its due time (no message yet)."""
    return job.status is JobStatus.PENDING and job.not_before is not None and not job.published_at


def _event_rows(events: list[JobEvent]) -> list[list[Cell]]:
    return [
        [
            e.created_at.isoformat(timespec="milliseconds"),
            e.event,
            (e.status.value, e.status.value),
            str(e.attempt),
            duration(None if e.duration_ms is None else e.duration_ms / 1000),
            clip(e.message, 200),
        ]
        for e in events
    ]


@tracked.command(cls=CeleryCommand)
@click.argument("correlation_id")
@common.json_option
@click.pass_context
def pipeline(ctx: click.Context, correlation_id: str, as_json: bool) -> None:
    """Show a pipeline (the jobs sharing a correlation id) as a tree, and its state."""
    check_text("CORRELATION_ID", correlation_id)
    tracker = reader_of(ctx)
    with friendly("reading the pipeline"):
        found = tracker.pipeline(correlation_id)
    if as_json:
        tree = [{**job_dict(job), "depth": depth} for depth, job in found.tree()]
        emit_json(
            {
                "correlation_id": found.correlation_id,
                "state": found.state,
                "counts": found.counts,
                "jobs": tree,
            }
        )
        return
    click.echo(found.render())
