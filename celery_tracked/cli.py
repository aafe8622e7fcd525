"""``celery -A proj tracked ...``: the command-line side (entry point ``celery.commands``)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import click
from celery.bin.base import CeleryCommand, handle_preload_options

from . import migrate as migrations
from .errors import JobNotFound, TrackedError, first_line
from .jobs import utcnow
from .settings import Settings
from .tracker import Tracker


@contextmanager
def _friendly(action: str) -> Iterator[None]:
    """Errors as one masked line, never a driver traceback."""
    try:
        yield
    except click.ClickException:
        raise
    except Exception as exc:
        detail = first_line(str(exc), type(exc).__name__)
        raise click.ClickException(f"{action} failed: {detail}") from None


def _tracker(ctx: click.Context) -> Tracker:
    try:
        return Tracker.for_app(ctx.obj.app)
    except TrackedError as exc:
        raise click.ClickException(str(exc)) from None


def _database_url(ctx: click.Context) -> str:
    """Only the database setting: migrations need neither Redis nor a ``Tracker``."""
    try:
        return Settings.database_url_from_conf(ctx.obj.app.conf)
    except TrackedError as exc:
        raise click.ClickException(str(exc)) from None


@click.group(name="tracked")
@click.pass_context
@handle_preload_options
def tracked(ctx: click.Context) -> None:
    """celery-tracked: job rows, migrations and statistics."""


@tracked.command(cls=CeleryCommand)
@click.option("--revision", default="head", show_default=True, help="Alembic revision.")
@click.pass_context
def migrate(ctx: click.Context, revision: str) -> None:
    """Create or upgrade the tracking tables."""
    url = _database_url(ctx)
    with _friendly(f"migration on {migrations.describe(url)}"):
        migrations.upgrade(url, revision)
    click.echo(f"celery-tracked tables at {revision} on {migrations.describe(url)}")


@tracked.command(cls=CeleryCommand)
@click.argument("revision")
@click.pass_context
def downgrade(ctx: click.Context, revision: str) -> None:
    """Downgrade the tracking tables (``base`` drops them)."""
    url = _database_url(ctx)
    with _friendly("downgrade"):
        migrations.downgrade(url, revision)
    click.echo(f"celery-tracked tables at {revision}")


@tracked.command(cls=CeleryCommand)
@click.argument("job_id")
@click.option("--history/--no-history", default=True, help="Show the job's events.")
@click.pass_context
def show(ctx: click.Context, job_id: str, history: bool) -> None:
    """Show one job (with its progress and stage, never its payload) and its history
    (the body's ``self.log`` lines included, event ``log``)."""
    tracker = _tracker(ctx)
    with _friendly("reading the job"):
        job = tracker.get_job(job_id)
        events = tracker.history(job_id) if history else []
    if job is None:
        click.echo(f"no job {job_id}", err=True)
        sys.exit(1)
    out: dict[str, Any] = {
        "id": job.id,
        "queue": job.queue_name,
        "job_type": job.job_type,
        "status": job.status.value,
        "attempts": f"{job.attempts_made}/{job.max_attempts}",
        "progress": job.progress,
        "stage": job.stage,
        "error": f"{job.error_type}: {job.error_message}" if job.error_type else None,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }
    click.echo(json.dumps(out, indent=2))
    if history:
        for ev in events:
            click.echo(
                f"{ev.created_at.isoformat()}  {ev.event:<12} {ev.status.value:<10} "
                f"attempt={ev.attempt} {ev.message or ''}".rstrip()
            )


@tracked.command(cls=CeleryCommand)
@click.argument("correlation_id")
@click.pass_context
def pipeline(ctx: click.Context, correlation_id: str) -> None:
    """Show a pipeline (the jobs sharing a correlation id) as a tree, and its state."""
    tracker = _tracker(ctx)
    with _friendly("reading the pipeline"):
        try:
            found = tracker.pipeline(correlation_id)
        except JobNotFound as exc:
            click.echo(str(exc), err=True)
            sys.exit(1)
    click.echo(found.render())


@tracked.command(cls=CeleryCommand)
@click.pass_context
def stats(ctx: click.Context) -> None:
    """Counts per queue and status, oldest pending age."""
    tracker = _tracker(ctx)
    with _friendly("reading statistics"):
        stats = tracker.stats()
    click.echo(json.dumps(stats, indent=2, sort_keys=True))


@tracked.command(cls=CeleryCommand)
@click.option("--port", default=9808, show_default=True, type=int, help="HTTP port.")
@click.option("--addr", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option(
    "--cache", default=10.0, show_default=True, type=float, help="Seconds a table read is kept."
)
@click.pass_context
def metrics(ctx: click.Context, port: int, addr: str, cache: float) -> None:
    """Serve Prometheus metrics on http://ADDR:PORT/metrics: jobs by queue and status read
    from the table, and the workers' counters (with PROMETHEUS_MULTIPROC_DIR)."""
    from . import metrics as prom

    tracker = _tracker(ctx)
    with _friendly("starting the metrics server"):
        prom.require()
        grace = timedelta(seconds=tracker.settings.relay_grace_seconds)
        read = prom.table_reader(
            tracker.stats, lambda: tracker.store.backlog(cutoff=utcnow() - grace)
        )
        stop = prom.serve(prom.registry(prom.TableCollector(read, cache)), port, addr)
    multiproc = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    counters = (
        f"counters from {multiproc}" if multiproc else "no counters (no PROMETHEUS_MULTIPROC_DIR)"
    )
    click.echo(f"celery-tracked metrics on http://{addr}:{port}/metrics ({counters})")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
