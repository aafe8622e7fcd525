"""``celery tracked web``: serve the dashboard (the ``web`` extra; docs/dashboard.md).

It refuses to start without an authentication choice: tokens from the environment
(``TRACKED_WEB_ADMIN_TOKEN``, ``TRACKED_WEB_READ_TOKEN``: never on the
command line, where ``ps`` shows them) or ``--auth module:callable``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import click
from celery.bin.base import CeleryCommand
from celery.utils.imports import cwd_in_path

from ..core.errors import ConfigurationError
from ..core.printable import visible
from .common import Failed, tracker_of
from .group import tracked

ADMIN_ENV = "TRACKED_WEB_ADMIN_TOKEN"
READ_ENV = "TRACKED_WEB_READ_TOKEN"
SECRET_ENV = "TRACKED_WEB_SECRET_KEY"
NO_AUTH = (
    f"the dashboard needs an authentication choice: set {ADMIN_ENV} (and/or {READ_ENV}) to "
    "a token of 16 characters or more, or give --auth module:callable (a callable "
    "receiving the request and returning an Identity); it never serves without one"
)


def _callable(spec: str) -> Any:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise click.BadParameter(f"{spec!r}: give module:callable", param_hint="--auth")
    try:
        with cwd_in_path():  # as ``-A proj`` finds ``proj``: a module beside the project
            found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"{spec!r}: {exc}", param_hint="--auth") from None
    if not callable(found):
        raise click.BadParameter(f"{spec!r} is not callable", param_hint="--auth")
    return found


@tracked.command(cls=CeleryCommand)
@click.option("--port", default=8808, show_default=True, type=int, help="HTTP port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--auth", "auth_spec", default=None, help="module:callable(request) -> Identity.")
@click.option("--owner-scoped", is_flag=True, help="Non-admins see only their owner_id's jobs.")
@click.option("--root-path", default="", help="The path prefix a reverse proxy serves it under.")
@click.option(
    "--forwarded-allow-ips",
    default=None,
    help="Proxies whose X-Forwarded-* headers are trusted (uvicorn's option).",
)
@click.pass_context
def web(
    ctx: click.Context,
    /,
    port: int,
    host: str,
    auth_spec: str | None,
    owner_scoped: bool,
    root_path: str,
    forwarded_allow_ips: str | None,
) -> None:
    """Serve the dashboard on http://HOST:PORT/: the jobs, their history and the actions
    on them (an admin or read-only token, or --auth)."""
    try:
        import uvicorn

        from ..web import TokenAuth, dashboard
    except ImportError:
        raise Failed(
            'the dashboard needs the "web" extra: pip install "celery-tracked[web]"'
        ) from None
    admin, read = os.environ.get(ADMIN_ENV) or None, os.environ.get(READ_ENV) or None
    if auth_spec is None and admin is None and read is None:
        raise click.UsageError(NO_AUTH)
    tracker = tracker_of(ctx)
    try:
        auth = _callable(auth_spec) if auth_spec else TokenAuth(admin=admin, read_only=read)
        app = dashboard(
            tracker,
            auth=auth,
            secret_key=os.environ.get(SECRET_ENV) or None,
            owner_scoped=owner_scoped,
        )
    except ConfigurationError as exc:
        raise click.UsageError(visible(str(exc))) from None
    click.echo(visible(f"celery-tracked dashboard on http://{host}:{port}{root_path}/"))
    uvicorn.run(
        app,
        host=host,
        port=port,
        root_path=root_path,
        proxy_headers=forwarded_allow_ips is not None,
        forwarded_allow_ips=forwarded_allow_ips,
        log_level="warning",
    )
