"""``celery tracked migrate`` / ``downgrade``: need only the database setting (no Redis,
no ``Tracker``)."""

from __future__ import annotations

import click
from celery.bin.base import CeleryCommand

from ..core.errors import TrackedError
from ..core.printable import visible
from ..core.settings import Settings
from ..store import migrate as migrations
from .common import Failed, friendly
from .group import tracked


def _database_url(ctx: click.Context) -> str:
    try:
        return Settings.database_url_from_conf(ctx.obj.app.conf)
    except TrackedError as exc:
        raise Failed(str(exc)) from None


@tracked.command(cls=CeleryCommand)
@click.option("--revision", default="head", show_default=True, help="Alembic revision.")
@click.pass_context
def migrate(ctx: click.Context, revision: str) -> None:
    """Create or upgrade the tracking tables."""
    url = _database_url(ctx)
    with friendly(f"migration on {migrations.describe(url)}"):
        migrations.upgrade(url, revision)
    click.echo(visible(f"celery-tracked tables at {revision} on {migrations.describe(url)}"))


@tracked.command(cls=CeleryCommand)
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def downgrade(ctx: click.Context, revision: str, yes: bool) -> None:
    """Downgrade the tracking tables (``base`` drops them, and every job with them): asks
    first, naming the database (its password masked); ``--yes`` skips the question."""
    url = _database_url(ctx)
    where = migrations.describe(url)
    what = "DROP the tracking tables and every job" if revision == "base" else "downgrade"
    if not yes:
        question = visible(f"{what} on {where} (to revision {revision})?")
        if not click.confirm(question, default=False, err=True):
            raise click.exceptions.Exit(1)
    with friendly(f"downgrade on {where}"):
        migrations.downgrade(url, revision)
    click.echo(visible(f"celery-tracked tables at {revision} on {where}"))
