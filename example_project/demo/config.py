"""The demo's configuration: embedded (nothing to run) unless the service variables are set.

Embedded: ``memory://`` broker, SQLite file in ``.demo/`` (or ``DEMO_DATA_DIR``), the
in-process guard. Services: ``DEMO_BROKER_URL`` as the broker; celery-tracked reads
``CELERY_TRACKED_DATABASE_URL`` and ``CELERY_TRACKED_REDIS_URL`` itself. Setting some of
the three but not all is refused (a half-configured run would mix the two modes).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from celery import Celery

# the course's steps are shared tasks; importing them creates the courses app (as the
# current app): done first, so that the demo's app, created after it, is the current one
import example_project.courses.tasks  # noqa: F401

#: The repository's root (``make demo`` runs from it).
ROOT = Path(__file__).resolve().parents[2]
#: All three set: run against real services; none set: embedded.
SERVICE_VARIABLES = ("DEMO_BROKER_URL", "CELERY_TRACKED_DATABASE_URL", "CELERY_TRACKED_REDIS_URL")
#: The queues of the story (the worker consumes all of them).
QUEUES = ("documents", "jobs", "courses")


class DemoConfigError(ValueError):
    """Some of the service variables are set, not all."""


def uses_services(environ: Mapping[str, str]) -> bool:
    """True when all service variables are set, False when none is."""
    present = [name for name in SERVICE_VARIABLES if environ.get(name)]
    if present and len(present) < len(SERVICE_VARIABLES):
        missing = ", ".join(n for n in SERVICE_VARIABLES if n not in present)
        names = ", ".join(SERVICE_VARIABLES)
        raise DemoConfigError(f"set all of {names} or none: {missing} missing")
    return bool(present)


def data_dir(environ: Mapping[str, str]) -> Path:
    """Where the embedded run keeps its SQLite file (``.demo/`` unless ``DEMO_DATA_DIR``)."""
    return Path(environ.get("DEMO_DATA_DIR") or ROOT / ".demo")


def sqlite_url(environ: Mapping[str, str]) -> str:
    return f"sqlite:///{data_dir(environ) / 'demo.sqlite3'}"


def create_app(environ: Mapping[str, str]) -> Celery:
    """The demo app for the mode ``environ`` selects."""
    services = uses_services(environ)
    demo = Celery(
        "demo",
        broker=environ["DEMO_BROKER_URL"] if services else "memory://",
        include=["example_project.demo.tasks", "example_project.courses.tasks"],
    )
    demo.conf.update(
        task_default_queue="courses",  # the course steps declare no queue of their own
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        tracked_default_backoff_ms=200,  # short retries: the story is watched live
        tracked_rate_limit_ms=100,  # the course's AI limiter (2000 ms by default)
        tracked_progress_interval_ms=100,  # progress written often enough to be seen
    )
    if not services:
        demo.conf.tracked_database_url = sqlite_url(environ)
        demo.conf.tracked_redis_url = "memory://"  # the in-process guard: embedded only
    return demo
