"""``celery tracked metrics``: serve Prometheus metrics (docs/operations.md, "Metrics")."""

from __future__ import annotations

import os
import time

import click
from celery.bin.base import CeleryCommand

from ..core.printable import visible
from .common import friendly, tracker_of
from .group import tracked


@tracked.command(cls=CeleryCommand)
@click.option("--port", default=9808, show_default=True, type=int, help="HTTP port.")
@click.option("--addr", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option(
    "--cache",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds a table read is kept.",
)
@click.pass_context
def metrics(ctx: click.Context, port: int, addr: str, cache: float) -> None:
    """Serve Prometheus metrics on http://ADDR:PORT/metrics: jobs by queue and status read
    from the table, and the workers' counters (with PROMETHEUS_MULTIPROC_DIR)."""
    from ..services import metrics as prom

    tracker = tracker_of(ctx)
    with friendly("starting the metrics server"):
        prom.require()
        read = prom.table_reader(
            tracker.stats, tracker.celery_side.relay_backlog, tracker.paused, tracker.circuits
        )
        stop = prom.serve(prom.registry(prom.TableCollector(read, cache)), port, addr)
    multiproc = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    counters = f"counters from {multiproc}" if multiproc else "no PROMETHEUS_MULTIPROC_DIR"
    click.echo(visible(f"celery-tracked metrics on http://{addr}:{port}/metrics ({counters})"))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
