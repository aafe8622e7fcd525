"""``celery tracked circuits`` / ``circuit open`` / ``circuit close``: the circuit breakers
(``Tracker.circuits``/``open_circuit``/``close_circuit``; ``services/circuits.py``)."""

from __future__ import annotations

from datetime import datetime

import click
from celery.bin.base import CeleryCommand

from ..core.circuits import Circuit
from ..core.printable import visible
from .common import emit_json, friendly, json_option, reader_of, tracker_of
from .common import style as output_style
from .group import tracked
from .render import Cell, table


@tracked.command(cls=CeleryCommand)
@json_option
@click.pass_context
def circuits(ctx: click.Context, as_json: bool) -> None:
    """The circuit breakers: state, failures in the window, jobs held, when and why it
    opened, times opened, probes sent."""
    tracker = reader_of(ctx)
    with friendly("reading the circuits"):
        found = tracker.circuits()
    if as_json:
        emit_json({"circuits": [c.as_dict() for c in found]})
        return
    if not found:
        click.echo("no circuit has failed or been opened")
        return
    click.echo(table(HEADERS, rows(found), output_style()))


@tracked.group(cls=click.Group)
def circuit() -> None:
    """Open or close a circuit breaker by hand."""


@circuit.command("open", cls=CeleryCommand)
@click.argument("name")
@click.option("--reason", default=None, help="Why (shown by `tracked circuits`).")
@click.option("--by", default=None, help="Who (default: user@host).")
@json_option
@click.pass_context
def open_circuit(
    ctx: click.Context, name: str, reason: str | None, by: str | None, as_json: bool
) -> None:
    """Open a circuit by hand: every worker holds its jobs in the database (no attempt
    used) until `tracked circuit close NAME`.

    \b
    celery -A proj tracked circuit open stripe --reason "provider incident"
    """
    tracker = tracker_of(ctx)
    with friendly("opening the circuit"):
        found = tracker.open_circuit(name, reason=reason, by=by)
    if as_json:
        emit_json(found.as_dict())
    else:
        click.echo(visible(found.describe()))


@circuit.command("close", cls=CeleryCommand)
@click.argument("name")
@json_option
@click.pass_context
def close_circuit(ctx: click.Context, name: str, as_json: bool) -> None:
    """Close a circuit: the jobs it held are published, oldest first."""
    tracker = tracker_of(ctx)
    with friendly("closing the circuit"):
        closed = tracker.close_circuit(name)
    if as_json:
        emit_json({"closed": closed})
    else:
        click.echo("closed" if closed else "it was closed")


HEADERS = ("NAME", "STATE", "FAILURES", "HELD", "OPENED", "BY", "REASON", "OPENS", "PROBES")


def _at(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def rows(found: list[Circuit]) -> list[list[Cell]]:
    """The circuits' rows (``HEADERS``); times: the database's clock, to the second."""
    return [
        [
            c.name,
            c.state,
            str(c.failures),
            str(c.held),
            _at(c.opened_at),
            c.opened_by or "-",
            c.reason or "-",
            str(c.opened_count),
            str(c.probes),
        ]
        for c in found
    ]
