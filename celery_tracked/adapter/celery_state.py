"""Which Celery app a task bound to, for messages.

A task declared without ``app=`` (``tracked_task``, ``shared_task``) binds to the current
app, and a thread that never set one (FastAPI's thread pool...) gets the default app
Celery creates itself: its settings are not the user's. :func:`describe_app` names the
app a setting was read from, and for that one, the fix. Celery's internal state
(``celery._state``) is read here only, defensively (an attribute it drops gives "no
other app", never an error). :func:`settings_for` reads an app's settings, naming the
app in a refusal."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from celery import _state

from ..core.errors import ConfigurationError
from ..core.settings import Settings

logger = logging.getLogger("celery_tracked")


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


def settings_for(app: Any, environ: Mapping[str, str] | None = None) -> Settings:
    """``Settings.from_conf`` of a Celery app's ``conf``; a refusal also names the app that
    was read and, for Celery's own default app, why it was read and the fix (also logged as
    a warning when that app's settings are accepted).

    Raises:
        ConfigurationError: as ``Settings.from_conf``.
    """
    try:
        settings = Settings.from_conf(app.conf, environ)
    except ConfigurationError as exc:
        raise type(exc)(exc.setting, f"{exc.reason} ({describe_app(app)})") from None
    if is_celery_default(app):  # it may well be a mistake: say so once
        logger.warning("celery-tracked: tracking jobs with settings %s", describe_app(app))
    return settings
