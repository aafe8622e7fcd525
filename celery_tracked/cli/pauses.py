"""``celery tracked pause`` / ``resume`` / ``paused``: what runs, by queue, job type or
everything (``Tracker.pause``/``resume``/``paused``; ``services/pauses.py``)."""

from __future__ import annotations

from typing import Any

import click
from celery.bin.base import CeleryCommand

from ..core.pauses import Pause
from ..core.printable import visible
from .common import emit_json, friendly, json_option, reader_of, tracker_of
from .common import style as output_style
from .group import tracked
from .render import Cell, table


def _scope_options(func: Any) -> Any:
    func = click.option("--all", "everything", is_flag=True, help="Everything.")(func)
    func = click.option("--job-type", "job_type", metavar="NAME", help="A job type.")(func)
    return click.option("--queue", metavar="NAME", help="A queue.")(func)


def _scope(queue: str | None, job_type: str | None, everything: bool) -> dict[str, Any]:
    """The scope's keywords; exactly one of --queue, --job-type, --all (named as flags).

    Raises:
        click.UsageError: none or several given.
    """
    given = [f for f, v in (("--queue", queue), ("--job-type", job_type)) if v is not None]
    given += ["--all"] if everything else []
    if len(given) != 1:
        got = " and ".join(given) or "none"
        raise click.UsageError(
            f"give exactly one of --queue NAME, --job-type NAME or --all (got {got})"
        )
    return {"queue": queue, "job_type": job_type, "everything": everything}


@tracked.command(cls=CeleryCommand)
@_scope_options
@click.option("--reason", default=None, help="Why (shown by `tracked paused`).")
@click.option("--by", default=None, help="Who (default: user@host).")
@json_option
@click.pass_context
def pause(
    ctx: click.Context,
    queue: str | None,
    job_type: str | None,
    everything: bool,
    reason: str | None,
    by: str | None,
    as_json: bool,
) -> None:
    """Pause a queue, a job type or everything: running jobs finish; every worker holds
    the next deliveries in the database (no attempt used) within seconds, until resume.

    \b
    celery -A proj tracked pause --job-type ocr --reason "provider down"
    celery -A proj tracked pause --queue emails
    """
    tracker = tracker_of(ctx)
    with friendly("pausing"):
        found = tracker.pause(**_scope(queue, job_type, everything), reason=reason, by=by)
    if as_json:
        emit_json(found.as_dict())
    else:
        click.echo(visible(found.describe()))


@tracked.command(cls=CeleryCommand)
@_scope_options
@json_option
@click.pass_context
def resume(
    ctx: click.Context, queue: str | None, job_type: str | None, everything: bool, as_json: bool
) -> None:
    """Resume what `tracked pause` paused: the jobs it held are published, oldest first."""
    tracker = tracker_of(ctx)
    with friendly("resuming"):
        resumed = tracker.resume(**_scope(queue, job_type, everything))
    if as_json:
        emit_json({"resumed": resumed})
    else:
        click.echo("resumed" if resumed else "it was not paused")


@tracked.command(cls=CeleryCommand)
@json_option
@click.pass_context
def paused(ctx: click.Context, as_json: bool) -> None:
    """What is paused: scope, name, by whom, since when, why."""
    tracker = reader_of(ctx)
    with friendly("reading the pauses"):
        found = tracker.paused()
    if as_json:
        emit_json({"paused": [p.as_dict() for p in found]})
        return
    if not found:
        click.echo("nothing is paused")
        return
    click.echo(table(HEADERS, rows(found), output_style()))


HEADERS = ("SCOPE", "NAME", "BY", "SINCE", "REASON")


def rows(found: list[Pause]) -> list[list[Cell]]:
    """The pauses' rows (``HEADERS``); since: the database's clock, to the second."""
    return [
        [
            p.scope,
            p.name,
            p.paused_by or "-",
            p.paused_at.isoformat(timespec="seconds"),
            p.reason or "-",
        ]
        for p in found
    ]
