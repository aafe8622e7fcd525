"""The dashboard's ASGI app: :func:`dashboard` builds it for one Celery app's tracker.

Every read and action goes through the :class:`~celery_tracked.Tracker` facade (the CLI's
services); this package holds no SQL. :class:`Dash` is what the routes share: the
tracker, the authentication choice, the signer, the templates and the overview's cache.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..adapter.celery_tracker import Tracker
from ..core.errors import ConfigurationError
from ..core.printable import visible
from ..core.redact import first_line
from .auth import CSRF_COOKIE, Identity, Signer, TokenAuth, bearer, check_auth, identify

logger = logging.getLogger("celery_tracked.web")
HERE = Path(__file__).resolve().parent

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
    """ASGI middleware: :data:`SECURITY_HEADERS` on every response."""

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

        await self.app(scope, receive, sending)


class Dash:
    """What every route shares (see the module's docstring)."""

    #: the overview is read at most this often (many open tabs cost one read)
    OVERVIEW_S = 3.0

    def __init__(
        self, tracker: Tracker, auth: Any, secret_key: str | bytes | None, owner_scoped: bool
    ) -> None:
        self.tracker = tracker
        self.auth = check_auth(auth)
        self.signer = Signer(secret_key)
        self.owner_scoped = owner_scoped
        self.env = Environment(
            loader=PackageLoader("celery_tracked.web", "templates"),
            autoescape=select_autoescape(default=True),
        )
        self._cache: tuple[float, Any] | None = None
        self._lock = threading.Lock()

    @property
    def tokens(self) -> bool:
        """Whether the dashboard signs browsers in itself (``TokenAuth``: a login page)."""
        return isinstance(self.auth, TokenAuth)

    def cached(self, read: Callable[[], Any]) -> Any:
        """``read()``'s value, read again once :attr:`OVERVIEW_S` have passed."""
        with self._lock:
            if self._cache is not None and time.monotonic() - self._cache[0] < self.OVERVIEW_S:
                return self._cache[1]
        value = read()
        with self._lock:
            self._cache = (time.monotonic(), value)
        return value

    def scoped(self, who: Identity) -> str | bool | None:
        """False: ``who`` sees every job; else the only ``owner_id`` whose jobs they see
        (None: no jobs at all)."""
        if not self.owner_scoped or who.admin:
            return False
        return who.owner_id

    async def who(self, request: Request) -> Identity | None:
        return await identify(self.auth, self.signer, request)

    def base(self, request: Request) -> str:
        """The dashboard's path prefix (its mount point, or the proxy's root path)."""
        return str(request.scope.get("root_path", "")).rstrip("/")

    def render(
        self, request: Request, who: Identity | None, name: str, status: int = 200, **ctx: Any
    ) -> HTMLResponse:
        """The template ``name``, with the base path, the identity and a CSRF token (its
        cookie set when the request had none valid for ``who``)."""
        cookie = request.cookies.get(CSRF_COOKIE)
        fresh = cookie is None or not self.signer.csrf_valid(who, cookie)
        token = self.signer.csrf(who) if fresh else cookie
        html = self.env.get_template(name).render(
            base=self.base(request), who=who, csrf=token, tokens=self.tokens, **ctx
        )
        response = HTMLResponse(html, status_code=status)
        if fresh:
            self.set_cookie(request, response, CSRF_COOKIE, str(token))
        return response

    def set_cookie(self, request: Request, response: Response, name: str, value: str) -> None:
        response.set_cookie(
            name,
            value,
            path=self.base(request) or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def refuse(self, request: Request, who: Identity | None, status: int, why: str) -> Response:
        """An error page (or JSON under ``/api``) with ``why``, masked and escaped."""
        why = visible(self.tracker.settings.masking.mask(why))
        if request.url.path.startswith(self.base(request) + "/api/"):
            return JSONResponse({"error": why}, status_code=status)
        template = "login.html" if status == 401 and self.tokens else "error.html"
        return self.render(request, who, template, status, error=why, code=status)

    def bearer(self, request: Request) -> bool:
        return bearer(self.auth, request)


def failure(exc: BaseException) -> str:
    """A store or broker failure as one safe line."""
    return first_line(str(exc), type(exc).__name__)


Endpoint = Callable[[Request], Awaitable[Response]]


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
    from .acts import Acts
    from .pages import Pages

    tracker = app if isinstance(app, Tracker) else Tracker.for_app(app)
    if not isinstance(tracker, Tracker):
        raise ConfigurationError("dashboard(app): a Celery app or its Tracker")
    dash = Dash(tracker, auth, secret_key, owner_scoped)
    pages, acts = Pages(dash), Acts(dash)
    routes: list[BaseRoute] = [*pages.routes(), *acts.routes()]
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    web = Starlette(routes=routes, exception_handlers={Exception: pages.crashed})
    web.state.dash = dash
    web.add_middleware(SecurityHeaders)
    return web


__all__ = ["Dash", "Endpoint", "Route", "dashboard", "failure"]
