"""A Celery app configured for one test: the ``tracked_*`` settings, a fresh store and a
fresh guard, the broker's queues empty. No pytest here (the fixtures in ``plugin.py``
wrap these; a ``unittest`` suite can use them directly).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from celery import Celery, current_app

from ..adapter.celery_tracker import Tracker
from ..core.conversions import MEMORY_URL
from ..core.errors import ConfigurationError
from ..store.migrate import upgrade

__all__ = [
    "MEMORY",
    "SQLITE",
    "SqliteTemplate",
    "purge_queues",
    "tracked_settings",
    "tracked_test_app",
]

#: ``tracked_database``: the in-memory store (``tracked_database_url = "memory://"``).
MEMORY = "memory"
#: ``tracked_database``: a SQLite file of its own, its tables migrated.
SQLITE = "sqlite"

_MISSING = object()
#: How long purging the queues may wait for the broker.
PURGE_S = 10


class SqliteTemplate:
    """A SQLite file migrated once (on first use), copied for each test that wants one:
    a copy takes a millisecond, the migrations a quarter of a second."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._migrated: Path | None = None

    def copy(self, directory: str | os.PathLike[str]) -> str:
        """The URL of a new SQLite file in ``directory`` holding the migrated tables."""
        if self._migrated is None:
            migrated = self.directory / "tracked-template.sqlite3"
            upgrade(f"sqlite:///{migrated}")
            self._migrated = migrated
        target = Path(directory) / f"tracked-{uuid.uuid4().hex}.sqlite3"
        shutil.copyfile(self._migrated, target)
        return f"sqlite:///{target}"


def tracked_settings(
    database: str = MEMORY,
    directory: str | os.PathLike[str] | None = None,
    template: SqliteTemplate | None = None,
) -> dict[str, Any]:
    """The ``tracked_*`` settings of one test.

    ``database``: ``"memory"`` (the in-memory store), ``"sqlite"`` (a new SQLite file in
    ``directory``, its tables created with the migrations, or copied from ``template``'s
    file when given; ``directory`` a ``str`` or a path) or a database URL (its tables
    brought up to date; isolating its rows between tests is then yours). The guard is the
    in-process one (``memory://``) under a key prefix of its own, so no idempotency key
    carries over from another test or run; retries are due at once (no backoff).

    Raises:
        ConfigurationError: ``"sqlite"`` without a ``directory``, or not a URL.
    """
    if database == MEMORY:
        url = MEMORY_URL
    elif database == SQLITE:
        if directory is None:
            raise ConfigurationError("tracked_database", "'sqlite' needs a directory")
        url = (template or SqliteTemplate(directory)).copy(directory)
    elif "://" in database:
        url = database
        upgrade(url)
    else:
        raise ConfigurationError(
            "tracked_database", f"expected 'memory', 'sqlite' or a database URL, got {database!r}"
        )
    return {
        "tracked_database_url": url,
        "tracked_redis_url": MEMORY_URL,
        "tracked_key_prefix": f"test-{uuid.uuid4().hex}",
        "tracked_default_backoff_ms": 0,
        "tracked_max_backoff_ms": 0,
    }


@contextmanager
def tracked_test_app(app: Celery, config: Mapping[str, Any]) -> Iterator[Celery]:
    """``app`` with ``config`` applied for the block, and a new tracker built from it;
    ``app`` is the current app in the block (a task declared without ``app=`` binds to it).

    Before and after: the app's tracker is closed and dropped (``Tracker.forget``) and the
    broker's known queues purged, so nothing of one test (rows, keys, messages) reaches
    the next. After: the app's previous values of ``config``'s settings are put back.
    """
    config = {**config, **_quick_memory_broker(app)}
    previous = {name: app.conf.get(name, _MISSING) for name in config}
    previous_app = cast(Any, current_app)._get_current_object()  # the app, not the proxy
    Tracker.forget(app)
    app.conf.update(config)
    purge_queues(app)
    app.set_current()
    try:
        yield app
    finally:
        previous_app.set_current()
        Tracker.forget(app)
        purge_queues(app)
        for name, value in previous.items():
            if value is _MISSING:
                app.conf.pop(name, None)
            else:
                app.conf[name] = value


def _quick_memory_broker(app: Celery) -> dict[str, Any]:
    """On kombu's in-memory broker, a worker polls its queues every 10 ms (not every
    second): an in-process worker picks a message up, and stops, at once."""
    if not str(app.conf.broker_url or "").startswith("memory://"):
        return {}
    options = dict(app.conf.broker_transport_options or {})
    options.setdefault("polling_interval", 0.01)
    return {"broker_transport_options": options}


def purge_queues(app: Celery) -> None:
    """Drop the messages waiting in the app's queues (its default queue, its
    ``task_queues``); nothing in eager mode or when the broker cannot be reached."""
    if app.conf.task_always_eager:
        return
    names = {str(app.conf.task_default_queue), *(str(name) for name in app.amqp.queues)}
    with app.connection_for_write() as connection:
        errors = (*connection.connection_errors, *connection.channel_errors)
        try:  # one try, bounded: Celery's own connection retries for minutes
            connection.ensure_connection(
                max_retries=1, timeout=PURGE_S, reraise_as_library_errors=False
            )
            channel: Any = connection.default_channel
            for name in sorted(names):
                channel.queue_purge(name)
        except errors:
            return
