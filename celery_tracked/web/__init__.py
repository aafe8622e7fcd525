"""The dashboard (the ``web`` extra: ``pip install "celery-tracked[web]"``): see, search and
act on jobs in a browser, safely; docs/dashboard.md.

    from celery_tracked.web import TokenAuth, dashboard

    app.mount("/jobs", dashboard(celery_app, auth=TokenAuth(admin=os.environ["JOBS_TOKEN"])))

or standalone: ``celery -A proj tracked web --port 8808``. Modules: ``app`` (the ASGI app,
its security headers, what the routes share), ``auth`` (identities, roles, tokens, CSRF),
``pages`` (the reads), ``acts`` (the actions), ``filters`` (the list's query string),
``views`` (what a page shows of a job: never its result or a redacted value).
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        'the dashboard needs the "web" extra: pip install "celery-tracked[web]"'
    ) from exc

from .asgi import dashboard
from .auth import ADMIN, READ_ONLY, Identity, TokenAuth

__all__ = ["ADMIN", "READ_ONLY", "Identity", "TokenAuth", "dashboard"]
