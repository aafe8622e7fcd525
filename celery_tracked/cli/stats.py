"""``celery tracked stats``: counts per queue and status, the pending jobs not due yet
(``SCHEDULED``, counted in ``PENDING`` too), the oldest due pending job's age, failures in
the last hour and expired leases (``Tracker.stats``)."""

from __future__ import annotations

import click
from celery.bin.base import CeleryCommand

from ..core.jobs import JobStatus
from ..core.printable import visible
from .common import emit_json, friendly, json_option, reader_of
from .common import style as output_style
from .group import tracked
from .render import Cell, duration, table

HEADERS = (
    "QUEUE",
    *(s.value.upper() for s in JobStatus),
    "SCHEDULED",
    "TOTAL",
    "OLDEST PENDING",
    "FAILED 1H",
    "EXPIRED LEASES",
)


@tracked.command(cls=CeleryCommand)
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts per queue and status, oldest pending age, failures in the last hour,
    expired leases; then what is paused."""
    tracker = reader_of(ctx)
    with friendly("reading statistics"):
        per_queue = tracker.stats()
        held = tracker.paused()
    if as_json:
        emit_json(per_queue)
        return
    if not per_queue:
        click.echo("no jobs")
        return
    rows: list[list[Cell]] = []
    for queue, entry in sorted(per_queue.items()):
        counts = entry["counts"]
        row: list[Cell] = [queue]
        for status in JobStatus:
            n = counts.get(status.value, 0)
            row.append((str(n), status.value) if n else "0")
        age = entry["oldest_pending_age_s"]
        failed, expired = entry.get("failed_last_hour", 0), entry.get("expired_leases", 0)
        row += [
            str(entry.get("scheduled", 0)),
            str(entry["total"]),
            "-" if age is None else duration(age),
            (str(failed), "failed" if failed else None),
            (str(expired), "retrying" if expired else None),
        ]
        rows.append(row)
    click.echo(table(HEADERS, rows, output_style()))
    for pause in held:  # the job types' pauses too (each queue's is in its entry)
        click.echo(visible(pause.describe()))
