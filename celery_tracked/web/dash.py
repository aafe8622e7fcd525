"""What the dashboard's routes share (:class:`Dash`): the tracker, the authentication
choice, the signer, the templates, the overview's cache, and the page (or JSON) of a
refusal."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ..adapter.celery_tracker import Tracker
from ..core.printable import duration, visible
from ..core.redact import first_line
from .auth import (
    CSRF_COOKIE,
    Identity,
    Signer,
    Throttle,
    TokenAuth,
    bearer,
    check_auth,
    identify,
)

logger = logging.getLogger("celery_tracked.web")


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
        #: wrong tokens per client address: on the login page and as bearer tokens
        self.throttle = Throttle()
        self.env = Environment(
            loader=PackageLoader("celery_tracked.web", "templates"),
            autoescape=select_autoescape(default=True),
        )
        self.env.filters["duration"] = duration  # "4m 05s", as the CLI shows ages
        self._cache: tuple[float, Any] | None = None
        self._lock = threading.Lock()
        self._reading = threading.Lock()

    @property
    def tokens(self) -> bool:
        """Whether the dashboard signs browsers in itself (``TokenAuth``: a login page)."""
        return isinstance(self.auth, TokenAuth)

    def cached(self, read: Callable[[], Any]) -> Any:
        """``read()``'s value, read again once :attr:`OVERVIEW_S` have passed, by one
        request at a time (the others wait for its value: many tabs, one read)."""
        found = self._fresh()
        if found is not None:
            return found[0]
        with self._reading:
            found = self._fresh()  # another request read it meanwhile
            if found is not None:
                return found[0]
            value = read()
            with self._lock:
                self._cache = (time.monotonic(), value)
        return value

    def _fresh(self) -> tuple[Any] | None:
        with self._lock:
            if self._cache is not None and time.monotonic() - self._cache[0] < self.OVERVIEW_S:
                return (self._cache[1],)
        return None

    def forget(self) -> None:
        """Drop the cached overview (an action changed what it shows)."""
        with self._lock:
            self._cache = None

    def scoped(self, who: Identity) -> str | bool | None:
        """False: ``who`` sees every job; else the only ``owner_id`` whose jobs they see
        (None: no jobs at all)."""
        if not self.owner_scoped or who.admin:
            return False
        return who.owner_id

    async def who(self, request: Request) -> Identity | None:
        return await identify(self.auth, self.signer, request)

    async def gate(self, request: Request, why: str) -> Identity | Response:
        """Who sent ``request``, or the refusal: 401 (``why``) without an identity, 429
        for an address that sent too many wrong tokens (a wrong bearer token counts as a
        wrong sign-in: both are guesses)."""
        guess = self.bearer(request)
        client = self.client(request)
        if guess and not self.throttle.allowed(client):
            return self.refuse(request, None, 429, "too many wrong tokens: try again later")
        who = await self.who(request)
        if who is None:
            if guess:
                self.throttle.failed(client)
                logger.warning("dashboard: a wrong bearer token from %s", client)
            return self.refuse(request, None, 401, why)
        return who

    @staticmethod
    def client(request: Request) -> str:
        """The client's address (the proxy's, unless uvicorn trusts its headers)."""
        return request.client.host if request.client else "?"

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
