"""The ``celery tracked`` group; each command lives in a module of this package."""

from __future__ import annotations

import click
from celery.bin.base import handle_preload_options


@click.group(
    name="tracked",
    epilog=(
        "Exit codes: 0 done, 1 not found, 2 usage, 3 refused (some job was not moved), "
        "4 failed (database, Redis or broker, or a setting)."
    ),
)
@click.pass_context
@handle_preload_options
def tracked(ctx: click.Context) -> None:
    """celery-tracked: find and act on jobs, migrations and statistics."""
