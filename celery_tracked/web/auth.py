"""Who is asking, and may they: the dashboard's authentication, roles and CSRF tokens.

An authentication choice is required (``dashboard(..., auth=...)``):

- :class:`TokenAuth`: an admin token and/or a read-only token; a browser signs in once on
  the login page (a signed, ``HttpOnly``, ``SameSite=Strict`` session cookie), a script
  sends ``Authorization: Bearer <token>``;
- a callable receiving the Starlette ``Request`` and returning an :class:`Identity` (or
  None: not signed in), sync or async: the framework's own authentication when the
  dashboard is mounted (a FastAPI dependency's check, Django's session, a proxy's header).

Two roles: ``admin`` (reads and acts) and ``read_only`` (reads). Every action also needs a
CSRF token: a random nonce signed with the dashboard's secret for the identity (a
double-submit cookie and a form field that must match it, or the ``X-CSRF-Token``
header); a page renders it into each of its forms.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import json
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from ..core.errors import ConfigurationError

ADMIN = "admin"
READ_ONLY = "read_only"
ROLES = (ADMIN, READ_ONLY)
SESSION_COOKIE = "ct_session"
CSRF_COOKIE = "ct_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
#: How long a signed-in browser stays signed in.
SESSION_S = 12 * 3600
#: The shortest token accepted (a guessable token is no authentication).
MIN_TOKEN = 16


@dataclass(frozen=True)
class Identity:
    """Who is asking: ``name`` (recorded as the actor of each action), ``role``
    (``admin`` or ``read_only``) and, for the owner mode, the ``owner_id`` whose jobs a
    non-admin sees."""

    name: str
    role: str = READ_ONLY
    owner_id: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ConfigurationError("role", f"one of {ROLES}, not {self.role!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError("name", "an identity needs one (the actor of its actions)")

    @property
    def admin(self) -> bool:
        return self.role == ADMIN


class TokenAuth:
    """Bearer tokens: ``admin`` and/or ``read_only`` (each at least 16 characters; read
    them from the environment or a secret store, never from source code)."""

    def __init__(self, admin: str | None = None, read_only: str | None = None) -> None:
        given = {ADMIN: admin, READ_ONLY: read_only}
        self._tokens = {role: t for role, t in given.items() if t}
        if not self._tokens:
            raise ConfigurationError("auth", "TokenAuth needs an admin or a read_only token")
        for role, token in self._tokens.items():
            if len(token) < MIN_TOKEN:
                raise ConfigurationError("auth", f"the {role} token is shorter than {MIN_TOKEN}")
        if admin and admin == read_only:
            raise ConfigurationError("auth", "the admin and read_only tokens are the same")

    def stamp(self, role: str) -> str:
        """A fingerprint of ``role``'s token, carried by its sessions: replacing the token
        ends the sessions signed in with the old one."""
        token = self._tokens.get(role, "")
        return hashlib.sha256(b"celery-tracked-session|" + token.encode()).hexdigest()[:16]

    def identity(self, token: str) -> Identity | None:
        """The identity ``token`` stands for (compared in constant time), or None."""
        found = None
        for role, known in self._tokens.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                found = Identity(f"{role} (token)", role)
        return found


#: a callable receiving the request, returning who it is (None: not signed in)
AuthCallable: TypeAlias = Callable[[Request], "Identity | Awaitable[Identity | None] | None"]
Auth: TypeAlias = "TokenAuth | AuthCallable"


def check_auth(auth: Any) -> Auth:
    """``auth`` if it is a choice the dashboard takes.

    Raises:
        ConfigurationError: no choice (None), or not a ``TokenAuth`` nor a callable.
    """
    if auth is None:
        raise ConfigurationError(
            "auth",
            "the dashboard needs an authentication choice: auth=TokenAuth(admin=..., "
            "read_only=...) or auth=a callable(request) returning an Identity "
            "(docs/dashboard.md); it never serves without one",
        )
    if not isinstance(auth, TokenAuth) and not callable(auth):
        raise ConfigurationError("auth", f"a TokenAuth or a callable, not {type(auth).__name__}")
    return cast(Auth, auth)


class Signer:
    """HMAC-SHA256 over the dashboard's secret: session cookies and CSRF tokens."""

    def __init__(self, secret: str | bytes | None) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)  # sessions end with the process
        elif isinstance(secret, str):
            secret = secret.encode()
        if len(secret) < MIN_TOKEN:
            raise ConfigurationError("secret_key", f"at least {MIN_TOKEN} bytes")
        self._key = secret

    def sign(self, text: str) -> str:
        mac = hmac.new(self._key, text.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def valid(self, text: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(text), signature)

    def session(self, who: Identity, stamp: str = "") -> str:
        """A session cookie's value for ``who`` (expires after :data:`SESSION_S`;
        ``stamp``: :meth:`TokenAuth.stamp`, checked on every request)."""
        expires = int(time.time()) + SESSION_S
        body = {"n": who.name, "r": who.role, "o": who.owner_id, "e": expires, "s": stamp}
        text = base64.urlsafe_b64encode(json.dumps(body).encode()).decode()
        return f"{text}.{self.sign(text)}"

    def from_session(self, value: str | None, auth: TokenAuth) -> Identity | None:
        """The identity of a session cookie, if it is one this signer made, unexpired, and
        signed in with the token ``auth`` holds now for its role."""
        if not value or value.count(".") != 1:
            return None
        text, signature = value.split(".")
        if not self.valid(text, signature):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(text))
            if int(body["e"]) < time.time() or body.get("s") != auth.stamp(body["r"]):
                return None
            return Identity(body["n"], body["r"], body["o"])
        except (ValueError, KeyError, TypeError, ConfigurationError):
            return None

    def csrf(self, who: Identity | None, nonce: str | None = None) -> str:
        """A CSRF token for ``who`` (anonymous: the login form's)."""
        nonce = nonce or secrets.token_urlsafe(18)
        return f"{nonce}.{self.sign('csrf|' + _name(who) + '|' + nonce)}"

    def csrf_valid(self, who: Identity | None, token: str | None) -> bool:
        if not token or token.count(".") != 1:
            return False
        nonce, signature = token.split(".")
        return self.valid("csrf|" + _name(who) + "|" + nonce, signature)


class Throttle:
    """Wrong sign-ins per client address: after :attr:`LIMIT` within :attr:`WINDOW_S`
    seconds, that address is refused (429) until the oldest of them is that old. Per
    process; behind a proxy the address is the proxy's unless uvicorn trusts it
    (``--forwarded-allow-ips``)."""

    LIMIT = 5
    WINDOW_S = 300.0

    def __init__(self) -> None:
        self._failures: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> list[float]:
        kept = [t for t in self._failures.get(key, []) if now - t < self.WINDOW_S]
        if kept:
            self._failures[key] = kept
        else:
            self._failures.pop(key, None)
        return kept

    def allowed(self, key: str) -> bool:
        with self._lock:
            return len(self._recent(key, time.monotonic())) < self.LIMIT

    def failed(self, key: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._failures[key] = [*self._recent(key, now), now]


def _name(who: Identity | None) -> str:
    return "" if who is None else f"{who.role}:{who.name}"


async def identify(auth: Auth, signer: Signer, request: Request) -> Identity | None:
    """Who sent ``request``: the bearer token or the session cookie (``TokenAuth``), or
    what the callable says (a sync one run in the thread pool: it may read a database)."""
    if isinstance(auth, TokenAuth):
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return auth.identity(header[7:].strip())
        return signer.from_session(request.cookies.get(SESSION_COOKIE), auth)
    asynchronous = inspect.iscoroutinefunction(auth) or inspect.iscoroutinefunction(
        getattr(auth, "__call__", None)  # noqa: B004 - an instance with an async __call__
    )
    found = auth(request) if asynchronous else await run_in_threadpool(auth, request)
    if inspect.isawaitable(found):  # a sync_to_async wrapper, a partial of a coroutine
        found = await found
    if found is not None and not isinstance(found, Identity):
        raise ConfigurationError("auth", f"returned a {type(found).__name__}, not an Identity")
    return found


def bearer(auth: Auth, request: Request) -> bool:
    """Whether ``TokenAuth`` identified ``request`` by its ``Authorization`` header (a
    script: a browser never adds that header to a cross-site form, so no CSRF token)."""
    header = request.headers.get("authorization", "")
    return isinstance(auth, TokenAuth) and header.lower().startswith("bearer ")


def csrf_ok(signer: Signer, who: Identity | None, request: Request, field: str | None) -> bool:
    """The double submit: the cookie holds a token signed for ``who``, and the form field
    (or the header) is the same token."""
    cookie = request.cookies.get(CSRF_COOKIE)
    given = field or request.headers.get(CSRF_HEADER)
    if not cookie or not given or not hmac.compare_digest(cookie, given):
        return False
    return signer.csrf_valid(who, cookie)
