"""The dashboard's ASGI app: :func:`dashboard` builds it for one Celery app's tracker.

Every read and action goes through the :class:`~celery_tracked.Tracker` facade (the CLI's
services); this package holds no SQL. The routes share a :class:`~.dash.Dash`; every
response carries :data:`SECURITY_HEADERS`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..adapter.celery_tracker import Tracker
from ..core.errors import ConfigurationError, TrackedError
from .acts import Acts
from .dash import Dash
from .pages import Pages

HERE = Path(__file__).resolve().parent
logger = logging.getLogger("celery_tracked.web")

#: The headers of every response (docs/dashboard.md, "Security"): no inline script or
#: style, no framing, no sniffing, no referrer leaving the site.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every response, an unexpected error's
    500 included (logged here; the page says nothing of it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower()
                           not in SECURITY_HEADERS]  # fmt: skip
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = headers
            await send(message)

        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await sending(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            logger.exception("dashboard error on %s", scope.get("path"))
            if started:
                raise
            response = PlainTextResponse("internal error (logged)", status_code=500)
            await response(scope, receive, sending)


def dashboard(
    app: Any,
    *,
    auth: Any = None,
    secret_key: str | bytes | None = None,
    owner_scoped: bool = False,
) -> Starlette:
    """The dashboard of ``app`` (a Celery app, or its :class:`~celery_tracked.Tracker`),
    an ASGI app to mount (``app.mount("/jobs", dashboard(celery_app, auth=...))``) or to
    serve (``celery -A proj tracked web``).

    Args:
        auth: required: a :class:`TokenAuth`, or a callable(request) returning an
            :class:`Identity` or None (sync or async).
        secret_key: signs session cookies and CSRF tokens; give the same one to every
            process serving the dashboard (default: random, per process).
        owner_scoped: a non-admin sees only the jobs of their identity's ``owner_id``.

    Raises:
        ConfigurationError: no authentication choice, or a bad one.
    """
    tracker = app if isinstance(app, Tracker) else Tracker.for_app(app)
    if not isinstance(tracker, Tracker):
        raise ConfigurationError("dashboard(app): a Celery app or its Tracker")
    dash = Dash(tracker, auth, secret_key, owner_scoped)
    pages, acts = Pages(dash), Acts(dash)
    routes: list[BaseRoute] = [*pages.routes(), *acts.routes()]
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    web = Starlette(routes=routes, exception_handlers={TrackedError: pages.failed})
    web.state.dash = dash
    web.add_middleware(SecurityHeaders)
    return web


__all__ = ["dashboard"]
