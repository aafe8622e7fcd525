"""Celery signal handlers: revoked messages cancel their job; worker start checks.

Connected when ``celery_tracked`` is imported.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from celery.signals import celeryd_after_setup, task_revoked, task_unknown, worker_init

from ..core.errors import ConfigurationError, GuardError, StoreError, TrackedError
from ..core.messages import TrackedHeaders
from ..core.printable import visible
from ..core.redact import mask_url
from ..core.settings import DEFAULT_DATABASE_URL
from ..store.migrate import schema_problem, sqlite_file
from . import (
    stopping,  # noqa: F401 (registers the worker's ``tracked_terminate`` command)
    untracked,  # noqa: F401 (warns of a tracked task sent untracked)
)
from .celery_tracker import Tracker
from .task import TrackedTask

logger = logging.getLogger("celery_tracked")


@task_revoked.connect(weak=False)
def cancel_revoked(sender: Any = None, request: Any = None, **info: Any) -> None:
    """A revoked or expired message never runs: cancel its waiting job (worker main
    process). ``revoke(terminate=True)`` killed a running job's pool child: once that
    process is gone, its run is cancelled (fenced to it, ``time_limits.py``)."""
    if not isinstance(sender, TrackedTask) or request is None:
        return
    # a Context: custom headers are attributes
    headers = TrackedHeaders.read(getattr(request, "headers", None), request)
    job_id = headers.job_id if headers is not None else getattr(request, "id", None)
    if not job_id:
        return
    expired = bool(info.get("expired"))
    reason = "expired before it ran" if expired else "revoked"
    # a revoke names the task id (every message of the job); an expiry, this message only
    revision = headers.revision if expired and headers is not None else None
    try:
        cancelled = sender.tracker.cancel(
            str(job_id),
            reason=f"message {reason}",
            log_message=f"job {job_id} cancelled: its message was {reason}",
            queue=headers.queue if headers is not None else None,
            job_type=sender.tracked_job_type,
            level=logging.WARNING,
            revision=revision,
        )
        if not cancelled and info.get("terminated"):
            sender.tracker.celery_side.time_limits.terminated(str(job_id))
    except TrackedError as exc:
        logger.error("job %s: could not record its revocation: %s", job_id, exc)


@task_unknown.connect(weak=False)
def cancel_unknown(sender: Any = None, message: Any = None, name: Any = None, **_: Any) -> None:
    """A worker received a tracked job's message for a task it has not registered (renamed
    or removed after the job was enqueued or held): Celery discards the message, so the job
    would wait until the reaper gave up on it. It ends ``cancelled`` now, ``error_type``
    ``UnknownTask``, with why (worker main process; only while that message is the job's
    current one)."""
    headers = TrackedHeaders.read(getattr(message, "headers", None))
    app = getattr(sender, "app", None)
    if headers is None or app is None:
        return
    worker = str(getattr(sender, "hostname", None) or "?")
    try:
        Tracker.for_app(app).cancel_unknown(headers.job_id, headers.revision, str(name), worker)
    except TrackedError as exc:
        logger.error("job %s: could not record that its task is unknown: %s", headers.job_id, exc)


@worker_init.connect(weak=False)
def check_worker(sender: Any = None, **_: Any) -> None:
    """At worker start: validate the settings, refuse a database without the tables at
    this version's head revision, and warn loudly if Redis may evict keys."""
    app = getattr(sender, "app", None)
    if app is None or not any(isinstance(t, TrackedTask) for t in app.tasks.values()):
        return
    try:
        tracker = Tracker.for_app(app)
    except ConfigurationError as exc:
        # signal handlers' exceptions are only logged: exit so the worker never runs
        # tracked jobs with a setting it cannot honour
        refuse_start(f"invalid configuration: {exc}")
    settings = tracker.settings
    check_schema(settings.database_url, app_name(app))
    if settings.memory_guard or not settings.check_redis_eviction:
        return
    try:
        policy = tracker.celery_side.eviction_policy()
    except GuardError as exc:
        logger.warning("celery-tracked: cannot reach Redis at %s: %s", settings.safe_redis_url, exc)
        return
    if policy is None:
        logger.warning(
            "celery-tracked: could not read maxmemory-policy of %s (CONFIG refused); make sure "
            "it is 'noeviction', or guard keys can be evicted",
            mask_url(settings.redis_url),
        )
    elif policy != "noeviction":
        logger.warning(
            "celery-tracked: Redis %s has maxmemory-policy=%s: guard keys can be EVICTED under "
            "memory pressure and duplicate jobs slip through to the database constraint. "
            "Set maxmemory-policy noeviction.",
            mask_url(settings.redis_url),
            policy,
        )


def check_schema(database_url: str, app: str = "proj") -> None:
    """Exit (as for an invalid setting) when the tracking tables are missing or behind this
    version's head revision: every job would fail (the command to run names ``app``). An
    unreachable database is only logged: the worker waits for it, as for its broker."""
    try:
        problem = schema_problem(database_url, app)
    except (StoreError, OSError) as exc:
        logger.warning("celery-tracked: could not check the tracking tables: %s", exc)
        return
    if problem is not None:
        refuse_start(problem)


def refuse_start(problem: str) -> NoReturn:
    """Stop the worker's start with ``problem``, said once, as a CRITICAL line: through the
    logging set up when there is some, else (``worker_init`` comes before Celery's
    logging) in the exit message Python prints."""
    text = f"celery-tracked: {problem}"
    if logger.hasHandlers():
        logger.critical("%s", text)
        if _reaches_terminal(logger):
            raise SystemExit(1)
    # no logging yet, or only to files: the terminal must still say why the worker stopped
    raise SystemExit(f"[CRITICAL] {text}")


def _reaches_terminal(start: logging.Logger) -> bool:
    """Whether a record of ``start`` reaches a handler writing to stdout or stderr."""
    current: logging.Logger | None = start
    while current is not None:
        for handler in current.handlers:
            stream = getattr(handler, "stream", None)
            if stream is not None and stream in (sys.stdout, sys.stderr, sys.__stderr__):
                return True
        current = current.parent if current.propagate else None
    return False


def app_name(app: Any, argv: Sequence[str] | None = None) -> str:
    """What the user passes to ``celery -A``: the worker's ``-A``/``--app`` value, else
    the app's main name, else ``proj``."""
    args = list(sys.argv if argv is None else argv)
    for index, arg in enumerate(args):
        if arg in ("-A", "--app") and index + 1 < len(args):
            return visible(args[index + 1])
        if arg.startswith("--app="):
            return visible(arg[len("--app=") :])
        if arg.startswith("-A") and len(arg) > 2:
            return visible(arg[2:])
    main = getattr(app, "main", None)
    return visible(main) if isinstance(main, str) and main and main != "__main__" else "proj"


@celeryd_after_setup.connect(weak=False)
def warn_embedded_sqlite(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """A worker on the embedded SQLite default (no ``tracked_database_url`` given) whose
    broker is not in memory: its producers elsewhere (or started in another directory)
    use another file, so name this one. Logged once the worker's logging is set up
    (``worker_init`` comes before it)."""
    app = getattr(instance, "app", None)
    if app is None or not any(isinstance(t, TrackedTask) for t in app.tasks.values()):
        return
    settings = Tracker.for_app(app).settings
    if settings.database_url != DEFAULT_DATABASE_URL:
        return
    broker = str(app.conf.broker_url or "amqp://")
    if broker.startswith("memory://"):
        return
    path = sqlite_file(settings.database_url)
    logger.warning(
        "celery-tracked: no tracked_database_url given: jobs are tracked in the embedded "
        "SQLite default %s, a file of this directory, while the broker (%s) is shared; a "
        "producer or worker started elsewhere uses another file. Set tracked_database_url.",
        path,
        mask_url(broker),
    )
