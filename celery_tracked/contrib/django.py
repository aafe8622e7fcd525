"""Django: the tracking database's SQLAlchemy URL from an entry of ``DATABASES``.

Django itself is not imported: the helper reads the settings dict, so it can be called in
``settings.py`` (``CELERY_TRACKED_DATABASE_URL = database_url(DATABASES["default"])``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import URL

from ..core.errors import ConfigurationError

#: Django's ``ENGINE`` → the SQLAlchemy dialect and driver celery-tracked uses with it.
DRIVERS: dict[str, str] = {
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.db.backends.mysql": "mysql+pymysql",
    "django.db.backends.sqlite3": "sqlite",
}


def database_url(database: Mapping[str, Any], *, driver: str | None = None) -> str:
    """The SQLAlchemy URL of one entry of Django's ``DATABASES`` setting.

    Args:
        database: the entry, e.g. ``DATABASES["default"]`` (``ENGINE``, ``NAME``, ``USER``,
            ``PASSWORD``, ``HOST``, ``PORT``; empty strings mean "not set", as in Django).
        driver: the SQLAlchemy ``dialect+driver`` to use instead of the one derived from
            ``ENGINE`` (e.g. ``"postgresql+psycopg2"``).

    Returns:
        The URL as a string, password included (for ``tracked_database_url``; the
        tracker masks it in every message it logs or raises).

    Raises:
        ConfigurationError: an ``ENGINE`` with no known driver (and no ``driver=``), or no
            ``NAME``. ``OPTIONS`` are not carried over: add them to the URL's query.
    """
    engine = str(database.get("ENGINE") or "")
    drivername = driver or DRIVERS.get(engine)
    if not drivername:
        known = ", ".join(sorted(DRIVERS))
        raise ConfigurationError(
            "tracked_database_url",
            f"no SQLAlchemy driver known for Django's ENGINE {engine!r} (known: {known}); "
            "pass driver='dialect+driver'",
        )
    name = str(database.get("NAME") or "")
    if not name:
        raise ConfigurationError("tracked_database_url", "the Django database has no NAME")
    if drivername.startswith("sqlite"):
        return str(URL.create(drivername, database=name))
    port = database.get("PORT")
    return URL.create(
        drivername,
        username=str(database.get("USER") or "") or None,
        password=str(database.get("PASSWORD") or "") or None,
        host=str(database.get("HOST") or "") or None,
        port=int(port) if port not in (None, "") else None,
        database=name,
    ).render_as_string(hide_password=False)
