"""``celery tracked relay``, ``reap``, ``cleanup``: one pass of a maintenance plugin
(``services/maintenance.py``), the one its Beat task runs, by hand; ``celery tracked
maintenance``: each plugin's last recorded pass (``Tracker.maintenance``).

One loop over the wiring's list (``celery_tracked.wiring.MAINTENANCE``) makes a command
per plugin, named after it, with the plugin's ``summary`` as its help: ``--json`` prints
the report (``as_dict()``), else a table of the jobs it moved (``WHAT``, ``JOB``) or the
plugin's ``idle`` line. The cleanup's command has its own view (rows per status, a
progress bar on a terminal) and ``--dry-run``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
from celery.bin.base import CeleryCommand

from ..adapter.celery_tracker import Tracker
from ..core.printable import visible
from ..services.cleanup import CleanupReport
from ..services.maintenance import Maintenance
from ..wiring import MAINTENANCE
from .common import emit_json, friendly, json_option, reader_of, tracker_of
from .common import style as output_style
from .group import tracked
from .render import Cell, duration, table


def one_pass(plugin: type[Maintenance]) -> click.Command:
    """The command of a plugin whose report lists job ids by what was done to them."""

    @json_option
    @click.pass_context
    def command(ctx: click.Context, as_json: bool) -> None:
        tracker = tracker_of(ctx)
        with friendly(plugin.name):
            report: dict[str, Any] = tracker.run_maintenance(plugin.name).as_dict()
        if as_json:
            emit_json(report)
            return
        rows: list[list[Cell]] = [
            [what, job_id] for what, job_ids in report.items() for job_id in job_ids
        ]
        if not rows:
            click.echo(plugin.idle)
            return
        click.echo(table(("WHAT", "JOB"), rows, output_style()))

    return click.command(plugin.name, cls=CeleryCommand, help=plugin.summary)(command)


def cleanup_command(plugin: type[Maintenance]) -> click.Command:
    """The cleanup's command: ``--dry-run``, removed rows per status, a progress bar."""

    @click.option("--dry-run", is_flag=True, help="Only count what would be removed.")
    @json_option
    @click.pass_context
    def command(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
        tracker = tracker_of(ctx)
        with friendly(plugin.name):
            report = _cleanup(tracker, dry_run, progress=not (dry_run or as_json))
        if as_json:
            emit_json(report.as_dict())
            return
        rows: list[list[Cell]] = [[status, str(n)] for status, n in report.removed.items()]
        rows.append(["total", str(report.total)])
        header = ("STATUS", "WOULD REMOVE" if dry_run else "REMOVED")
        click.echo(table(header, rows, output_style()))
        if not dry_run:
            click.echo(
                f"{report.events} events, {report.guard_entries} guard entries, "
                f"{report.batches} batches, {report.duration_s:.1f} s"
            )

    return click.command(plugin.name, cls=CeleryCommand, help=plugin.summary)(command)


def _cleanup(tracker: Tracker, dry_run: bool, progress: bool) -> CleanupReport:
    if not progress or not sys.stderr.isatty():
        return tracker.cleanup(dry_run=dry_run)
    total = tracker.cleanup(dry_run=True).total
    with click.progressbar(length=total, label="removing", file=sys.stderr) as bar:
        step: Callable[[int], None] = bar.update
        return tracker.cleanup(on_batch=step)


#: A plugin whose command is not :func:`one_pass`'s.
COMMANDS: dict[str, Callable[[type[Maintenance]], click.Command]] = {"cleanup": cleanup_command}

for _plugin in MAINTENANCE:  # one command per plugin
    tracked.add_command(COMMANDS.get(_plugin.name, one_pass)(_plugin))


HEADERS = ("PLUGIN", "LAST PASS", "TOOK", "JOBS", "COUNTS", "PASSES", "FAILED", "STATE")


@tracked.command("maintenance", cls=CeleryCommand)
@json_option
@click.pass_context
def maintenance_command(ctx: click.Context, as_json: bool) -> None:
    """Each maintenance plugin's last pass: how long ago (the database's clock), its
    counts, whether it failed; its totals since its first recorded pass; STALE when
    older than twice its default schedule."""
    tracker = reader_of(ctx)
    with friendly("reading the maintenance activity"):
        shown = [run.as_dict() for run in tracker.maintenance()]
    if as_json:
        emit_json({"maintenance": shown})
        return
    click.echo(table(HEADERS, [_row(entry) for entry in shown], output_style()))
    for entry in shown:
        if entry["failed"]:
            click.echo(visible(f"{entry['name']} failed: {entry['error']}"))


def _row(entry: dict[str, Any]) -> list[Cell]:
    state: Cell = ("stale", "retrying") if entry["stale"] else "ok"
    if entry["failed"]:
        state = ("failed", "failed")
    if not entry["ran"]:
        return [entry["name"], "never", "-", "-", "-", "0", "0", state]
    counts = ", ".join(f"{k} {n}" for k, n in sorted(entry["counts"].items()) if n) or "-"
    return [
        entry["name"],
        "just now" if entry["age_s"] < 1 else f"{duration(entry['age_s'])} ago",
        duration(entry["duration_s"]),
        f"{entry['jobs']} ({entry['jobs_total']} total)",
        counts,
        str(entry["passes"]),
        (str(entry["failures"]), "failed" if entry["failures"] else None),
        state,
    ]
