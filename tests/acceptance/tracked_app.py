"""The Celery app the acceptance tests run in real ``celery worker`` processes.

Importable as ``tracked_app`` (``celery -A tracked_app worker ...`` with this folder on
``PYTHONPATH``). The worker reads its configuration from the environment:

    TRACKED_TEST_BROKER            broker URL (a per-test Redis DB)
    TRACKED_TEST_BROKER_WRITE      if set: ``broker_write_url`` (the worker's re-publishes)
    TRACKED_TEST_RESULT_BACKEND    if set: ``result_backend``, with ``result_extended=True``
    CELERY_TRACKED_DATABASE_URL    the per-test PostgreSQL database (read by celery-tracked)
    REDIS_URL                      the guard's Redis (this app's own name for it, given to
                                   celery-tracked as ``tracked_redis_url``); if unset,
                                   ``tracked_redis_url`` is left unset too, so
                                   celery-tracked reads ``CELERY_TRACKED_REDIS_URL``
    TRACKED_TEST_RECORD_URL        Redis where bodies record their runs (default REDIS_URL)
    TRACKED_TEST_LEASE_SECONDS     tracked_lease_seconds (default 5)
    TRACKED_TEST_LOG_JSONL         if set: a JSON-lines file receiving every record of the
                                   ``celery_tracked`` logger, with its ``extra`` fields
    TRACKED_TEST_VISIBILITY_TIMEOUT  if set: the Redis transport's ``visibility_timeout``,
                                   its unacked messages swept every second (kombu 5.7
                                   sweeps every 10 x 10 s by default)

The tests build the same app in-process with :func:`create_app` (same task names), so
they can enqueue and read the tracker without touching the environment.

Bodies record every execution in Redis: ``INCR ran:<job_id>`` (exact execution counts),
``RPUSH spans:<job_id> "<pid> <start> <end>"`` (overlap checks).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import redis
from celery import Celery
from celery.exceptions import Ignore, Reject
from circuit_tasks import add_circuit_tasks
from compat_tasks import add_compat_tasks
from control_tasks import add_control_tasks
from converted_tasks import add_by_name_tasks, add_converted_tasks
from effects_tasks import add_effects_tasks
from fair_tasks import add_fair_tasks
from gil_tasks import add_gil_tasks
from key_tasks import add_key_tasks
from limit_tasks import add_limit_tasks
from ops_tasks import add_ops_tasks
from progress_tasks import add_progress_tasks
from retry_tasks import add_retry_tasks
from safety_tasks import CUSTOM_KEY, add_safety_tasks
from sealed_tasks import add_sealed_tasks
from web_tasks import add_web_tasks

from celery_tracked import JobNotFound, TrackedTask, Tracker, Unrecoverable, tracked_task
from celery_tracked.core.settings import DEFAULT_REDACT_KEYS

QUEUE = "acc"
#: ``application_name`` of every PostgreSQL connection a worker opens (libpq's PGAPPNAME,
#: set by the tests), so a test can find (and terminate) the worker's connections only.
WORKER_APPNAME = "celery-tracked-acc-worker"

_records: dict[int, redis.Redis] = {}


#: Long enough that a renewal (every third of it) delayed by a loaded 2-core machine never
#: lets a running attempt's lease lapse; tests that need a lapse wait on conditions.
DEFAULT_LEASE_SECONDS = 5.0
_FALLBACK_REDIS = "redis://127.0.0.1:6379/15"


def config_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    redis_url = env.get("REDIS_URL") or None
    some_redis = redis_url or env.get("CELERY_TRACKED_REDIS_URL") or _FALLBACK_REDIS
    return {
        "broker": env.get("TRACKED_TEST_BROKER", some_redis),
        "broker_write": env.get("TRACKED_TEST_BROKER_WRITE") or None,
        "database_url": env.get("CELERY_TRACKED_DATABASE_URL", "sqlite:///acceptance.sqlite3"),
        "redis_url": redis_url,
        "record_url": env.get("TRACKED_TEST_RECORD_URL", some_redis),
        "lease_seconds": float(env.get("TRACKED_TEST_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)),
        "result_backend": env.get("TRACKED_TEST_RESULT_BACKEND") or None,
        "visibility_timeout": env.get("TRACKED_TEST_VISIBILITY_TIMEOUT") or None,
    }


def recorder(app: Celery) -> redis.Redis:
    """A Redis client for the execution records, one per process."""
    pid = os.getpid()
    client = _records.get(pid)
    if client is None:
        client = redis.Redis.from_url(app.conf.acceptance_record_url)
        _records[pid] = client
    return client


def _job_id(task: Any) -> str:
    headers = task.request.headers or {}
    return str(headers.get("tracked_job_id") or task.request.id)


def _begin(task: Any) -> tuple[redis.Redis, str, int, float]:
    r = recorder(task.app)
    job_id = _job_id(task)
    run = int(r.incr(f"ran:{job_id}"))
    return r, job_id, run, time.time()


def _end(r: redis.Redis, job_id: str, started: float) -> None:
    r.rpush(f"spans:{job_id}", f"{os.getpid()} {started:.6f} {time.time():.6f}")


def _hold_until_go(r: redis.Redis, job_id: str) -> None:
    """Say the run is holding, then wait (at most 30 s) for the test's ``go:<job_id>``."""
    r.set(f"holding:{job_id}", os.getpid())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not r.exists(f"go:{job_id}"):
        time.sleep(0.05)


def create_app(config: Mapping[str, Any]) -> Celery:
    """A Celery app with the acceptance-test tasks, configured from ``config``."""
    app = Celery("tracked_acceptance", broker=config["broker"], set_as_current=False)
    app.conf.update(
        tracked_database_url=config["database_url"],
        tracked_lease_seconds=config.get("lease_seconds", DEFAULT_LEASE_SECONDS),
        tracked_default_backoff_ms=100,
        acceptance_record_url=config.get("record_url") or config["redis_url"],
        task_default_queue=QUEUE,
        task_send_sent_event=True,
        broker_connection_retry_on_startup=True,
        worker_redirect_stdouts=False,
        result_backend=None,
        task_ignore_result=True,
    )
    if config.get("database_pooler"):  # else celery-tracked reads its environment
        app.conf.tracked_database_pooler = config["database_pooler"]
    if config.get("redis_url"):  # else celery-tracked reads its environment
        app.conf.tracked_redis_url = config["redis_url"]
    if config.get("broker_write"):
        app.conf.broker_write_url = config["broker_write"]
    if config.get("visibility_timeout"):
        timeout = float(config["visibility_timeout"])
        app.conf.broker_transport_options = {
            "visibility_timeout": timeout,
            # a message unacknowledged longer than the timeout given back within a second
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        }
    if config.get("result_backend"):  # a Redis result backend storing the request's arguments
        app.conf.update(
            result_backend=config["result_backend"], result_extended=True, task_ignore_result=False
        )
    # the defaults plus a custom key with a hyphen (issue 6, item 5)
    app.conf.tracked_redact_keys = (*DEFAULT_REDACT_KEYS, CUSTOM_KEY)
    add_safety_tasks(app, QUEUE, _begin, _end)
    add_key_tasks(app, QUEUE, _begin, _end)
    add_progress_tasks(app, QUEUE, _begin, _end)
    add_limit_tasks(app, QUEUE, _begin, _end)
    add_fair_tasks(app, QUEUE, _begin, _end)
    add_ops_tasks(app, QUEUE, _begin, _end)
    add_gil_tasks(app, QUEUE, _begin, _end)
    add_retry_tasks(app, QUEUE, _begin, _end)
    add_effects_tasks(app, QUEUE, _begin, _end)
    add_sealed_tasks(app, QUEUE, _begin, _end)
    add_control_tasks(app, QUEUE, _begin, _end)
    add_circuit_tasks(app, QUEUE, _begin, _end)
    add_converted_tasks(app, QUEUE, _begin, _end)
    add_web_tasks(app, QUEUE, _begin, _end)
    add_by_name_tasks(app, QUEUE)
    add_compat_tasks(app, QUEUE, _begin, _end)

    @tracked_task(app=app, bind=True, shared=False, name="acc.succeed", queue=QUEUE, max_attempts=3)
    def succeed(self: Any, x: Any, sleep: float = 0.0) -> dict[str, Any]:
        r, job_id, run, started = _begin(self)
        if sleep:
            time.sleep(sleep)
        _end(r, job_id, started)
        return {"x": x, "run": run}

    @tracked_task(app=app, bind=True, shared=False, name="acc.timed", queue=QUEUE)
    def timed(self: Any, x: Any, fail_first_after: float = 0.0) -> dict[str, Any]:
        """Records its run and the deadline it reads (issue 26); its first run may sleep
        then fail (a retry follows)."""
        r, job_id, run, started = _begin(self)
        deadline = self.job_deadline
        r.set(f"deadline:{job_id}", "" if deadline is None else deadline.isoformat())
        _end(r, job_id, started)
        if run == 1 and fail_first_after:
            time.sleep(fail_first_after)
            raise ConnectionError("the first run fails")
        return {"x": x, "run": run}

    @tracked_task(app=app, bind=True, shared=False, name="acc.json_types", queue=QUEUE)
    def json_types(self: Any, at: datetime, amount: Decimal, id: uuid.UUID) -> dict[str, Any]:
        """Returns Celery's JSON types, computed from its arguments (so they arrived typed)."""
        r, job_id, _run, started = _begin(self)
        _end(r, job_id, started)
        return {"at": at + timedelta(hours=1), "amount": amount * 2, "id": uuid.UUID(int=id.int)}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.flaky",
        queue=QUEUE,
        max_attempts=3,
        backoff_ms=300,
    )
    def flaky(self: Any, x: Any) -> dict[str, Any]:
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        if run == 1:
            raise ConnectionError(f"transient failure of run {run}")
        return {"x": x, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.always_fail",
        queue=QUEUE,
        max_attempts=3,
        backoff_ms=50,
    )
    def always_fail(self: Any, x: Any) -> None:
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        detail = "x" * 900
        raise ValueError(f"run {run} of {x} failed: {detail}\nsecond line of the message")

    # Celery's retry options (issue 7, item 3; docs/configuration.md)
    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.autoretry",
        queue=QUEUE,
        autoretry_for=(ConnectionError,),
        backoff_ms=300,
    )
    def autoretry(self: Any, error: str) -> int:
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        if run == 1:
            raise ConnectionError("transient") if error == "connection" else KeyError(error)
        return run

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.max_retries",
        queue=QUEUE,
        autoretry_for=(ConnectionError,),
        max_retries=3,
        retry_backoff=True,
        retry_backoff_max=1,
        retry_jitter=False,
    )
    def max_retries(self: Any, x: Any) -> None:
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        raise ConnectionError(f"run {run} of {x}")

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.keyed",
        queue=QUEUE,
        idempotency_key="k:{x}",
        max_attempts=3,
    )
    def keyed(self: Any, x: Any, sleep: float = 0.0) -> dict[str, Any]:
        r, job_id, run, started = _begin(self)
        if sleep:
            time.sleep(sleep)
        _end(r, job_id, started)
        return {"x": x, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.unrecoverable",
        queue=QUEUE,
        max_attempts=5,
        backoff_ms=50,
    )
    def unrecoverable(self: Any, x: Any) -> None:
        r, job_id, _run, started = _begin(self)
        _end(r, job_id, started)
        raise Unrecoverable(f"document {x} is corrupt")

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.kill_me",
        queue=QUEUE,
        max_attempts=3,
        backoff_ms=100,
    )
    def kill_me(self: Any, x: Any) -> dict[str, Any]:
        """Run 1 publishes its pid and hangs (the test SIGKILLs it); later runs finish."""
        r, job_id, run, started = _begin(self)
        if run == 1:
            r.set(f"pid:{job_id}", os.getpid())
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.05)
        _end(r, job_id, started)
        return {"x": x, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.hold",
        queue=QUEUE,
        max_attempts=3,
        backoff_ms=200,
    )
    def hold(self: Any, x: Any) -> dict[str, Any]:
        """Run 1 says it is running and waits for the test's ``go:<job_id>``."""
        r, job_id, run, started = _begin(self)
        if run == 1:
            _hold_until_go(r, job_id)
        _end(r, job_id, started)
        return {"x": x, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.hold_then_unrecoverable",
        queue=QUEUE,
        max_attempts=5,
        backoff_ms=200,
    )
    def hold_then_unrecoverable(self: Any, x: Any) -> None:
        """Says it is running, waits for the test's ``go:<job_id>``, then gives up for good."""
        r, job_id, _run, started = _begin(self)
        _hold_until_go(r, job_id)
        _end(r, job_id, started)
        raise Unrecoverable(f"document {x} is gone")

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.secret",
        queue=QUEUE,
        max_attempts=3,
        backoff_ms=100,
    )
    def secret(self: Any, user: str, password: str, fail_times: int = 1) -> dict[str, Any]:
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        if run <= fail_times:
            raise RuntimeError(f"login failed for {user} with password {password}")
        return {"user": user, "run": run}

    # -- edge cases (test_edge_cases.py) ------------------------------------------------

    @tracked_task(app=app, bind=True, shared=False, name="acc.ignore", queue=QUEUE, max_attempts=3)
    def ignore(self: Any, x: Any) -> None:
        """The body drops its work on purpose: ``raise Ignore()``."""
        r, job_id, _run, started = _begin(self)
        _end(r, job_id, started)
        raise Ignore()

    @tracked_task(app=app, bind=True, shared=False, name="acc.reject", queue=QUEUE, max_attempts=3)
    def reject(self: Any, x: Any) -> None:
        """The body refuses its message for good: ``raise Reject(requeue=False)``."""
        r, job_id, _run, started = _begin(self)
        _end(r, job_id, started)
        raise Reject(f"document {x} refused", requeue=False)

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.hold_max_retries",
        queue=QUEUE,
        backoff_ms=200,
        max_retries=1,  # max_attempts=2 (issue 7, item 3)
    )
    def hold_max_retries(self: Any, x: Any) -> dict[str, Any]:
        """``acc.hold`` with Celery's own ``max_retries=1``."""
        r, job_id, run, started = _begin(self)
        if run == 1:
            _hold_until_go(r, job_id)
        _end(r, job_id, started)
        return {"x": x, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.autoretry_secret",
        queue=QUEUE,
        max_attempts=3,
        autoretry_for=(ValueError,),
        retry_kwargs={"countdown": 0.2},
    )
    def autoretry_secret(self: Any, user: str, password: str) -> dict[str, Any]:
        """Run 1 raises a ValueError holding the password (Celery's autoretry); then succeeds."""
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        if run == 1:
            raise ValueError(f"login failed for {user} with password {password}")
        return {"user": user, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.self_retry_secret",
        queue=QUEUE,
        max_attempts=3,
    )
    def self_retry_secret(self: Any, user: str, password: str) -> dict[str, Any]:
        """Run 1 calls ``self.retry(exc=...)`` with the password in the exception."""
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        if run == 1:
            exc = ValueError(f"login failed for {user} with password {password}")
            raise self.retry(exc=exc, countdown=0.2)
        return {"user": user, "run": run}

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.chained_secret",
        queue=QUEUE,
        max_attempts=2,
        backoff_ms=50,
    )
    def chained_secret(self: Any, user: str, password: str) -> None:
        """Every run raises ``RuntimeError("outer")`` caused by a ValueError with the password."""
        r, job_id, _run, started = _begin(self)
        _end(r, job_id, started)
        try:
            raise ValueError(f"inner {user} {password}")
        except ValueError as inner:
            raise RuntimeError("outer") from inner

    # -- documented behaviours (test_documented.py) ------------------------------------

    @tracked_task(
        app=app, bind=True, shared=False, name="acc.reject_requeue", queue=QUEUE, max_attempts=3
    )
    def reject_requeue(self: Any, x: Any) -> dict[str, Any]:
        """Run 1 hands its message back: ``raise Reject(requeue=True)``; later runs finish."""
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        if run == 1:
            raise Reject(f"document {x} not yet", requeue=True)
        return {"x": x, "run": run}

    @app.task(bind=True, shared=False, name="acc.plain")
    def plain(self: Any, x: Any) -> dict[str, Any]:
        """An untracked task (a replacement signature)."""
        r, job_id, run, started = _begin(self)
        r.set(f"plain:{job_id}", json.dumps({"x": x, "run": run}))
        _end(r, job_id, started)
        return {"x": x, "run": run}

    @tracked_task(app=app, bind=True, shared=False, name="acc.replacer", queue=QUEUE)
    def replacer(self: Any, x: Any) -> None:
        """Hands its work over to ``acc.plain`` with ``self.replace``."""
        r, job_id, _run, started = _begin(self)
        _end(r, job_id, started)
        raise self.replace(plain.s(f"replaced {x}"))

    @tracked_task(app=app, bind=True, shared=False, name="acc.replacer_tracked", queue=QUEUE)
    def replacer_tracked(self: Any, x: Any) -> None:
        """Hands its work over to the tracked ``acc.succeed`` with ``self.replace``."""
        r, job_id, _run, started = _begin(self)
        _end(r, job_id, started)
        raise self.replace(succeed.s(f"replaced {x}"))

    @tracked_task(app=app, bind=True, shared=False, name="acc.spawn", queue=QUEUE)
    def spawn(self: Any, x: Any) -> dict[str, Any]:
        """Enqueues a tracked child (``acc.succeed``) from inside its body."""
        r, job_id, run, started = _begin(self)
        child = succeed.enqueue(x=f"child of {x}")
        _end(r, job_id, started)
        return {"child": child.job_id, "run": run}

    @app.task(
        base=TrackedTask,
        bind=True,
        shared=False,
        name="acc.base_only",
        max_attempts=2,
        autoretry_for=(ConnectionError,),  # Celery's semantics: only these are retried
        default_retry_delay=0.2,  # Celery's default is 180 s
    )
    def base_only(self: Any, x: Any) -> dict[str, Any]:
        """Tracked through ``base=TrackedTask`` alone, no decorator; run 1 fails."""
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        if run == 1:
            raise ConnectionError(f"transient failure of run {run}")
        return {"x": x, "run": run}

    def positive_pages(arguments: dict[str, Any]) -> None:
        if arguments["pages"] < 1:
            raise ValueError(f"pages must be positive, got {arguments['pages']}")

    @tracked_task(
        app=app,
        bind=True,
        shared=False,
        name="acc.validated",
        queue=QUEUE,
        validator=positive_pages,
        idempotency_key="v:{document_id}",
    )
    def validated(self: Any, document_id: str, pages: int) -> dict[str, Any]:
        r, job_id, run, started = _begin(self)
        _end(r, job_id, started)
        return {"document_id": document_id, "pages": pages, "run": run}

    # -- reliability (test_reliability.py) ----------------------------------------------

    @tracked_task(app=app, bind=True, shared=False, name="acc.stepper", queue=QUEUE, max_attempts=3)
    def stepper(self: Any, x: Any, steps: int = 30) -> dict[str, Any]:
        """Takes ``steps`` steps of 0.1 s, each recorded as ``RPUSH steps:<job_id> "<pid>
        <attempt> <time>"``; publishes its pid as ``pid:<job_id>:<run>``."""
        r, job_id, run, started = _begin(self)
        r.set(f"pid:{job_id}:{run}", os.getpid())
        for _ in range(steps):
            r.rpush(f"steps:{job_id}", f"{os.getpid()} {run} {time.time():.6f}")
            time.sleep(0.1)
        _end(r, job_id, started)
        return {"x": x, "run": run}

    return app


# -- used by the concurrent-enqueue test (multiprocessing, spawn) ---------------------------


def enqueue_storm(
    config: dict[str, Any],
    key: str,
    threads: int,
    barrier: Any,
    results: Any,
) -> None:
    """In a separate process: ``threads`` threads enqueue the same key at the same moment."""
    app = create_app(config)
    task = app.tasks["acc.keyed"]
    tracker = Tracker.for_app(app)
    # connect to the database and to Redis before the race
    assert tracker.get_job(str(uuid.uuid4())) is None
    with contextlib.suppress(JobNotFound):
        tracker.wait(str(uuid.uuid4()), timeout=0.1)
    local = threading.Barrier(threads)
    out: list[tuple[str, bool, str]] = []
    lock = threading.Lock()

    def one() -> None:
        local.wait()
        try:
            res = task.enqueue(x=key)
            item = (res.job_id, res.created, "")
        except Exception as exc:  # reported to the test, which fails on it
            item = ("", False, repr(exc))
        with lock:
            out.append(item)

    workers = [threading.Thread(target=one) for _ in range(threads)]
    barrier.wait()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    results.put(out)
    tracker.close()


# -- the worker's app --------------------------------------------------------------------

_STANDARD = set(vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
}


class JsonLinesHandler(logging.Handler):
    """Writes each record's message and ``extra`` fields as one JSON line."""

    def __init__(self, path: str) -> None:
        super().__init__(logging.DEBUG)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            extras = {k: v for k, v in vars(record).items() if k not in _STANDARD}
            line = json.dumps(
                {
                    "message": record.getMessage(),
                    "level": record.levelname,
                    "pid": record.process,
                    "extra": extras,
                },
                default=str,
            )
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
        except Exception:
            self.handleError(record)


app = create_app(config_from_env())

if os.environ.get("TRACKED_TEST_BEAT"):  # a test's own Beat entries (test_key_lifetimes.py)
    app.conf.beat_schedule = {
        **(app.conf.beat_schedule or {}),
        **json.loads(os.environ["TRACKED_TEST_BEAT"]),
    }

if os.environ.get("TRACKED_TEST_MAINTENANCE_QUEUE"):  # Beat's tasks not behind a backlog
    app.conf.task_routes = {
        "celery_tracked.*": {"queue": os.environ["TRACKED_TEST_MAINTENANCE_QUEUE"]}
    }

if os.environ.get("TRACKED_TEST_LOG_JSONL"):
    _log = logging.getLogger("celery_tracked")
    _log.setLevel(logging.INFO)
    _log.addHandler(JsonLinesHandler(os.environ["TRACKED_TEST_LOG_JSONL"]))
