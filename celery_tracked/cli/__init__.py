"""``celery -A proj tracked ...``: the command-line side (entry point ``celery.commands``:
``celery_tracked.cli:tracked``).

One module per group of commands, each registering on the ``tracked`` group:
``schema`` (migrate, downgrade), ``listing`` (jobs, show, pipeline), ``actions`` (retry,
cancel), ``call`` (enqueue by name), ``stats``, ``maintenance`` (relay, reap, cleanup: one
per maintenance plugin), ``metrics``, ``web`` (the dashboard). Shared: ``common`` (exit
codes, errors, filters as options) and ``render`` (tables, relative times, colour, the
JSON form of a job). A new command is a new module imported here.
"""

from __future__ import annotations

from . import (  # noqa: F401
    actions,
    by_name,
    circuits,
    listing,
    maintenance,
    metrics,
    pauses,
    schema,
    stats,
    web,
)
from .group import tracked

__all__ = ["tracked"]
