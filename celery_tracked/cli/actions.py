"""``celery tracked retry`` / ``cancel``: one job by id, or every job the filters match
(``Tracker.retry_many`` / ``cancel_many``), each through its fenced move. Exit 3 when any
job was refused (the report says which and why)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import click
from celery.bin.base import CeleryCommand

from ..adapter.celery_tracker import Tracker
from ..core.errors import JobNotFound, RetryRefused
from ..core.finder import BulkReport, Filters
from ..core.jobs import JobStatus
from ..services.bulk import DEFAULT_LIMIT, RETRIABLE, why_not
from .common import (
    Refused,
    check_text,
    emit_json,
    filter_options,
    filters_from,
    friendly,
    json_option,
    parse_time,
    tracker_of,
)
from .common import style as output_style
from .group import tracked
from .render import Cell, table

_SELECTION_HELP = "Act on every job the action applies to (no filter), up to --limit."


def _selection(job_id: str | None, everything: bool, options: dict[str, Any]) -> Filters:
    """The filters of a bulk action; a job id excludes filters, and a bulk action needs a
    filter or ``--all``."""
    filters = filters_from(options)
    if job_id is not None:
        check_text("JOB_ID", job_id)
    if job_id is not None and (filters or everything):
        raise click.UsageError("give a job id or filters, not both")
    if job_id is None and not filters and not everything:
        raise click.UsageError("give a job id, filters (--status, --queue...) or --all")
    return filters


def _finish(report: BulkReport, as_json: bool, done: str) -> None:
    if as_json:
        emit_json(report.as_dict())
    else:
        style = output_style()
        click.echo(f"{done} {len(report.changed)} of {report.matched} matching job(s)")
        if report.skipped:
            click.echo(
                f"skipped {len(report.skipped)} failed by an error that is not retried "
                "(Unrecoverable, or not in its task's autoretry_for): add "
                "--include-unrecoverable to retry them"
            )
        if report.refused:
            rows: list[list[Cell]] = [[i, (why, "refused")] for i, why in report.refused.items()]
            click.echo(f"refused {len(report.refused)}:")
            click.echo(table(("ID", "REASON"), rows, style))
        if report.more:
            click.echo(
                "more jobs match beyond --limit: raise it, or narrow the filters "
                "(refused jobs match again)"
            )
    if report.refused:
        raise click.exceptions.Exit(Refused.exit_code)


@tracked.command(cls=CeleryCommand)
@click.argument("job_id", required=False)
@filter_options
@click.option("--all", "everything", is_flag=True, help=_SELECTION_HELP)
@click.option("--limit", default=DEFAULT_LIMIT, show_default=True, help="At most this many.")
@click.option(
    "--include-unrecoverable",
    is_flag=True,
    help="Also retry the jobs failed by an error that is not retried (Unrecoverable, or "
    "not in their task's autoretry_for); skipped otherwise.",
)
@click.option(
    "--deadline",
    metavar="VALUE",
    help="A new deadline for the one JOB_ID, replacing its own: a duration from now on the "
    "database's clock (10m, 2h) or an ISO 8601 date/time (no zone: UTC). Needed to retry a "
    "job whose deadline has passed (one cancelled DeadlineExceeded).",
)
@json_option
@click.pass_context
def retry(
    ctx: click.Context,
    /,
    job_id: str | None,
    everything: bool,
    limit: int,
    include_unrecoverable: bool,
    deadline: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Run failed (or cancelled) jobs again: one by id, or all the filters match (failed
    ones unless --status says otherwise; those failed by an error that is not retried are
    skipped unless --include-unrecoverable). Jobs with redacted arguments are retried from
    their sealed copy (tracked_secret_key); without one they are refused: retry them from
    Python with ``tracker.retry(job_id, arguments={...})``. A job whose deadline has passed
    is refused unless --deadline gives it a new one."""
    filters = _selection(job_id, everything, options)
    if deadline is not None and job_id is None:
        raise click.UsageError("--deadline applies to one job: give its JOB_ID")
    try:
        new_deadline = parse_time(deadline, ahead=True)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, param_hint="--deadline") from None
    tracker = tracker_of(ctx)
    with friendly("retrying"):
        if job_id is None:
            report = tracker.retry_many(
                limit=limit, include_unrecoverable=include_unrecoverable, **filters
            )
        else:
            report = _retry_one(tracker, job_id, new_deadline)
    _finish(report, as_json, "retried")


def _retry_one(
    tracker: Tracker, job_id: str, deadline: datetime | timedelta | None = None
) -> BulkReport:
    try:
        if tracker.retry(job_id, deadline=deadline):
            return BulkReport("retry", (job_id,))
    except RetryRefused as exc:
        return BulkReport("retry", (), {job_id: str(exc)})
    return BulkReport("retry", (), {job_id: why_not(tracker, job_id, "retried", RETRIABLE)})


@tracked.command(cls=CeleryCommand)
@click.argument("job_id", required=False)
@filter_options
@click.option("--all", "everything", is_flag=True, help=_SELECTION_HELP)
@click.option(
    "--running",
    is_flag=True,
    help="Also stop running jobs (terminated where the pool can; the body's "
    "self.cancelled() turns True); they end cancelled once their run is gone.",
)
@click.option("--reason", default="cancelled", show_default=True, help="Stored as the error.")
@click.option("--limit", default=DEFAULT_LIMIT, show_default=True, help="At most this many.")
@json_option
@click.pass_context
def cancel(
    ctx: click.Context,
    /,
    job_id: str | None,
    everything: bool,
    running: bool,
    reason: str,
    limit: int,
    as_json: bool,
    **options: Any,
) -> None:
    """Cancel waiting jobs (pending, retrying): one by id, or all the filters match;
    with --running, running ones too."""
    filters = _selection(job_id, everything, options)
    check_text("--reason", reason)
    tracker = tracker_of(ctx)
    with friendly("cancelling"):
        if job_id is None:
            report = tracker.cancel_many(limit=limit, reason=reason, running=running, **filters)
        else:
            report = _cancel_one(tracker, job_id, reason, running)
    _finish(report, as_json, "cancelled (or asked to stop)" if running else "cancelled")


def _cancel_one(tracker: Tracker, job_id: str, reason: str, running: bool) -> BulkReport:
    if tracker.get_job(job_id) is None:
        raise JobNotFound(f"no job {job_id}")
    if tracker.cancel(job_id, reason, running=running):
        return BulkReport("cancel", (job_id,))
    allowed: tuple[JobStatus, ...] = (JobStatus.PENDING, JobStatus.RETRYING)
    if running:
        allowed = (*allowed, JobStatus.PROCESSING)
    return BulkReport("cancel", (), {job_id: why_not(tracker, job_id, "cancelled", allowed)})
