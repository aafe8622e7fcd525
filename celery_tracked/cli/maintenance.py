"""``celery tracked cleanup`` and ``celery tracked reap``: one pass of the maintenance
tasks Beat runs (``Tracker.cleanup``, ``Tracker.reap``), by hand."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click
from celery.bin.base import CeleryCommand

from .common import emit_json, friendly, json_option, tracker_of
from .common import style as output_style
from .group import tracked
from .render import Cell, table


@tracked.command(cls=CeleryCommand)
@click.option("--dry-run", is_flag=True, help="Only count what would be removed.")
@json_option
@click.pass_context
def cleanup(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Remove the ended jobs past their retention (docs/operations.md, "Retention and
    cleanup"), in batches; a progress bar on a terminal."""
    tracker = tracker_of(ctx)
    with friendly("cleanup"):
        if dry_run or as_json or not sys.stderr.isatty():
            report = tracker.cleanup(dry_run=dry_run)
        else:
            total = tracker.cleanup(dry_run=True).total
            with click.progressbar(length=total, label="removing", file=sys.stderr) as bar:
                step: Callable[[int], None] = bar.update
                report = tracker.cleanup(on_batch=step)
    if as_json:
        emit_json(report.as_dict())
        return
    rows: list[list[Cell]] = [[status, str(n)] for status, n in report.removed.items()]
    rows.append(["total", str(report.total)])
    click.echo(table(("STATUS", "WOULD REMOVE" if dry_run else "REMOVED"), rows, output_style()))
    if not dry_run:
        click.echo(
            f"{report.events} events, {report.guard_entries} guard entries, "
            f"{report.batches} batches, {report.duration_s:.1f} s"
        )


@tracked.command(cls=CeleryCommand)
@json_option
@click.pass_context
def reap(ctx: click.Context, as_json: bool) -> None:
    """Rescue or abandon the stalled jobs (docs/operations.md, "Stalled jobs: the
    reaper"): one pass."""
    tracker = tracker_of(ctx)
    with friendly("reaping"):
        report = tracker.reap().as_dict()
    if as_json:
        emit_json(report)
        return
    rows: list[list[Cell]] = [
        [what, job_id] for what, job_ids in report.items() for job_id in job_ids
    ]
    if not rows:
        click.echo("nothing stalled")
        return
    click.echo(table(("WHAT", "JOB"), rows, output_style()))
