"""``python -m example_project.demo`` (``make demo``): the story, start to end.

Exit status 0 when every job ended as expected, 1 otherwise, 2 on a configuration error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator

from celery import Celery

from celery_tracked import Tracker
from celery_tracked.store import migrate

from . import report, story, workers
from .config import DemoConfigError, data_dir, uses_services

#: The whole story must end within this many seconds.
STORY_TIMEOUT_S = 45.0


def _workers(app: Celery, services: bool, tag: str) -> contextlib.AbstractContextManager[None]:
    return workers.subprocesses(app, tag, os.environ) if services else workers.in_process(app)


def _database_url(app: Celery, services: bool) -> str:
    if services:
        return os.environ["CELERY_TRACKED_DATABASE_URL"]
    folder = data_dir(os.environ)
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):  # a fresh story
        (folder / f"demo.sqlite3{suffix}").unlink(missing_ok=True)
    return str(app.conf.tracked_database_url)


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """The story's failures are expected: their tracebacks and warnings would bury the
    output (the histories show every attempt). ``DEMO_VERBOSE=1`` keeps all logs."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not os.environ.get("DEMO_VERBOSE"):
        for name in ("celery", "kombu", "celery_tracked"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    yield


def run(services: bool) -> bool:
    from .app import app  # configured from the environment, as the worker processes are

    app.set_current()
    app.loader.import_default_modules()  # the story's tasks (``include``), as a worker does
    tag = uuid.uuid4().hex[:6]
    mode = "services" if services else "embedded"
    print(f"celery-tracked demo ({mode}: {_describe(services)})", flush=True)
    migrate.upgrade(_database_url(app, services))
    tracker = Tracker.for_app(app)
    started = time.monotonic()
    with _workers(app, services, tag):
        print("\n== the story", flush=True)
        roots, deduplicated = story.submit(app, tag)
        counts = story.expected_counts(roots)
        finished = report.watch(tracker, roots, counts, STORY_TIMEOUT_S)
    found = story.verdicts(tracker, roots)
    report.table(found)
    report.pipeline(tracker, roots[-1])
    report.histories(tracker, found)
    print(f"\nthe story took {time.monotonic() - started:.1f} s")
    return report.result_line(mode, deduplicated, finished, found)


def _describe(services: bool) -> str:
    if services:
        return "DEMO_BROKER_URL, CELERY_TRACKED_DATABASE_URL, CELERY_TRACKED_REDIS_URL"
    path = data_dir(os.environ) / "demo.sqlite3"
    return f"SQLite {path}, memory:// broker, in-process guard and worker"


def main() -> int:
    try:
        services = uses_services(os.environ)
    except DemoConfigError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    with _quiet_logs():
        return 0 if run(services) else 1


if __name__ == "__main__":
    sys.exit(main())
