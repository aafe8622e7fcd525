"""Which Celery app a task bound to, for messages.

A task declared without ``app=`` (``tracked_task``, ``shared_task``) binds to the current
app, and a thread that never set one (FastAPI's thread pool...) gets the default app
Celery creates itself: its settings are not the user's. :func:`describe_app` names the
app a setting was read from, and for that one, the fix. Celery's internal state
(``celery._state``) is read here only, defensively (an attribute it drops gives "no
other app", never an error). :func:`check_crontab` is Celery's reading of a crontab
string, for the settings' converters (which import no Celery)."""

from __future__ import annotations

from typing import Any

from celery import _state
from celery.schedules import crontab


def default_app() -> Any:
    """Celery's default app (the one it created itself, or one set with ``set_default()``;
    None if neither happened yet)."""
    return getattr(_state, "default_app", None)


def get_active_apps() -> list[Any]:
    """The Celery apps alive in this process."""
    apps = getattr(_state, "_get_active_apps", None)  # a Celery without it: none named
    return [] if apps is None else list(apps())


def describe_app(app: Any) -> str:
    """Which Celery app a setting was read from, for messages: its main name, and, for
    the app Celery creates itself when none is current (a task declared without ``app=``
    used in another thread, e.g. FastAPI's thread pool), what to do instead."""
    name = getattr(app, "main", None) or "__main__"
    if not is_celery_default(app):
        return f"read from Celery app {name!r}"
    others = sorted({str(a.main) for a in get_active_apps() if a is not app and a.main})
    yours = f"your app ({', '.join(map(repr, others))})" if others else "your app"
    return (
        f"read from Celery's default app {name!r}, not from {yours}: a task declared "
        "without app= (tracked_task, shared_task) binds to the current app, and a thread "
        "that never set one (FastAPI's thread pool...) gets Celery's default app. Call "
        "app.set_default() once where your app is created, or declare the task with "
        "tracked_task(app=app)"
    )


def is_celery_default(app: Any) -> bool:
    """``app`` is the app Celery made itself because none was current or set default."""
    return app is default_app() and getattr(app, "main", None) == "default"


def check_crontab(text: str) -> None:
    """Refuse a crontab string (``"17 3 * * *"``: minute hour day-of-month month
    day-of-week) that Celery's ``crontab.from_string`` does not accept.

    Raises:
        ValueError: Celery's reason (a ``ParseException`` is one).
    """
    crontab.from_string(text)
