"""Acceptance (issue 7): a project in the usual layout, tested the way its users test it.

``tests/eager_proj`` is a Celery project (``proj/celery.py``, ``proj/tasks.py``) whose app
runs with ``task_always_eager`` and ``task_eager_propagates``. Here it is imported as a
user's test suite imports it (its folder on ``sys.path``, ``from proj import celery_app``)
on a SQLite file and a real Redis; then its own ``tests/`` run in a ``python -m pytest``
of their own, on PostgreSQL and a real Redis, and on the defaults of an embedded test
(SQLite, ``memory://``). ``delay().get()`` returns the value, a failing body raises its
own exception, the rows read ``completed``/``failed`` with their events.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from celery import Celery, chain, current_app
from celery.result import EagerResult

from celery_tracked import JobFailed, JobStatus, TrackedError, TrackedTask, Tracker
from celery_tracked.store.migrate import upgrade
from tests.conftest import _flushed_redis, _redis_db

PROJ_ROOT = Path(__file__).resolve().parent.parent / "eager_proj"
#: How many tests the project's own ``tests/`` hold: all of them must run and pass.
PROJECT_TESTS = sum(
    f.read_text().count("\ndef test_") for f in (PROJ_ROOT / "tests").glob("test_*.py")
)


@pytest.fixture(scope="module")
def proj_environ(
    redis_available: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The project's services, as its deployment gives them: ``PROJ_*`` variables."""
    database = tmp_path_factory.mktemp("proj") / "proj.sqlite3"
    with _redis_db() as db:
        for redis_url in _flushed_redis(db):
            yield {
                "PROJ_DATABASE_URL": f"sqlite:///{database}",
                "PROJ_REDIS_URL": redis_url,
                "PROJ_BROKER_URL": redis_url,
            }


@pytest.fixture(scope="module")
def proj_app(proj_environ: dict[str, str]) -> Iterator[Celery]:
    """``from proj import celery_app``, with the project's folder on ``sys.path``, and the
    tables created as the docs say for tests. Afterwards ``proj`` is forgotten."""
    previous = current_app._get_current_object()  # Celery("proj") makes itself current
    with pytest.MonkeyPatch.context() as patch:
        for name, value in proj_environ.items():
            patch.setenv(name, value)
        patch.syspath_prepend(str(PROJ_ROOT))
        app: Celery = importlib.import_module("proj").celery_app
        upgrade(app.conf.tracked_database_url)  # the tables, once per test database
        try:
            yield app
        finally:
            Tracker.for_app(app).close()
            app.close()
            for name in [m for m in sys.modules if m == "proj" or m.startswith("proj.")]:
                del sys.modules[name]
            previous.set_current()


@pytest.fixture
def tasks(proj_app: Celery) -> ModuleType:
    """``proj.tasks``, imported as a test module would (``from proj.tasks import add``)."""
    return importlib.import_module("proj.tasks")


@pytest.fixture
def tracker(proj_app: Celery) -> Tracker:
    return Tracker.for_app(proj_app)


@pytest.fixture
def broker(proj_environ: dict[str, str]) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(proj_environ["PROJ_BROKER_URL"])
    yield client
    client.close()


@pytest.fixture
def plain_parse(proj_app: Celery) -> Any:
    """``parse_int`` as a plain Celery task: what Celery does, to compare with."""
    name = "test_eager_proj.plain_parse"
    if name not in proj_app.tasks:

        @proj_app.task(name=name)
        def parse(text: str) -> int:
            return int(text)

    return proj_app.tasks[name]


def events(tracker: Tracker, job_id: str) -> list[tuple[str, str, int]]:
    return [(e.event, e.status.value, e.attempt) for e in tracker.history(job_id)]


def new_id() -> str:
    return str(uuid.uuid4())


RAN_ONCE = [("enqueued", "pending", 0), ("started", "processing", 1)]


def test_the_project_app_is_eager_and_tracked(proj_app: Celery, tasks: ModuleType) -> None:
    assert proj_app.main == "proj"
    assert (proj_app.conf.task_always_eager, proj_app.conf.task_eager_propagates) == (True, True)
    assert proj_app.conf.tracked_database_url.startswith("sqlite:///")
    assert tasks.add.name == "proj.tasks.add"
    assert isinstance(proj_app.tasks["proj.tasks.add"], TrackedTask)


def test_delay_and_apply_async_return_eager_results_and_the_rows_complete(
    tasks: ModuleType, tracker: Tracker, broker: redis.Redis
) -> None:
    result = tasks.add.delay(2, 3)
    assert isinstance(result, EagerResult)
    assert result.get() == 5
    assert (result.successful(), result.state) == (True, "SUCCESS")
    job = tracker.get_job(result.id)
    assert job is not None and job.status is JobStatus.COMPLETED
    assert (job.result, job.attempts_made, job.job_type, job.task_name) == (
        5,
        1,
        "add",
        "proj.tasks.add",
    )
    assert (job.queue_name, job.correlation_id, job.parent_job_id) == ("celery", job.id, None)
    assert job.started_at is not None and job.finished_at is not None
    assert events(tracker, result.id) == [*RAN_ONCE, ("completed", "completed", 1)]
    assert tracker.wait(result.id, timeout=5) == 5

    given = new_id()
    later = tasks.add.apply_async((4, 5), task_id=given, countdown=60)  # eager: runs now
    assert isinstance(later, EagerResult)
    assert (later.id, later.get()) == (given, 9)
    job = tracker.get_job(given)
    assert job is not None and (job.status, job.result) == (JobStatus.COMPLETED, 9)
    assert [e for e, _, _ in events(tracker, given)] == ["enqueued", "started", "completed"]

    assert tasks.add.apply_async(kwargs={"x": 1, "y": 1}).get() == 2
    assert tasks.add.enqueue(1, 2).status is JobStatus.COMPLETED  # ran before it returned
    # nothing was published: no queue, no kombu binding on the broker
    assert broker.llen("celery") == 0
    assert list(broker.scan_iter("_kombu*")) == []


def test_a_failing_body_raises_its_own_exception_and_the_row_is_failed(
    tasks: ModuleType, tracker: Tracker
) -> None:
    with pytest.raises(ValueError, match="invalid literal for int") as raised:
        tasks.parse_int.delay("x")
    assert type(raised.value) is ValueError  # the body's own, not a TrackedError
    assert not isinstance(raised.value, TrackedError)  # nor an EnqueueError

    job_id = new_id()
    started = time.monotonic()
    with pytest.raises(ValueError, match="'seven'"):
        tasks.parse_int.apply_async(("seven",), task_id=job_id)
    assert time.monotonic() - started < 5
    job = tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.FAILED
    assert (job.attempts_made, job.error_type) == (1, "ValueError")  # autoretry_for=()
    assert job.error_message is not None and "invalid literal for int" in job.error_message
    assert job.result is None and job.finished_at is not None
    assert events(tracker, job_id) == [*RAN_ONCE, ("failed", "failed", 1)]
    with pytest.raises(JobFailed):
        tracker.wait(job_id, timeout=5)


@pytest.mark.parametrize("propagates", [True, False])
def test_autoretry_for_retries_inline_and_the_job_completes_on_its_second_attempt(
    proj_app: Celery,
    tasks: ModuleType,
    tracker: Tracker,
    monkeypatch: pytest.MonkeyPatch,
    propagates: bool,
) -> None:
    monkeypatch.setitem(proj_app.conf, "task_eager_propagates", propagates)
    url = f"https://example.com/{new_id()}"
    started = time.monotonic()
    result = tasks.fetch.delay(url)
    assert isinstance(result, EagerResult)
    assert result.get() == {"url": url, "attempt": 2}
    assert time.monotonic() - started < 5  # retry_backoff=True: no sleep inline
    job = tracker.get_job(result.id)
    assert job is not None and job.status is JobStatus.COMPLETED
    assert (job.attempts_made, job.max_attempts) == (2, 4)  # max_retries=3: 4 attempts
    assert job.error_type is None  # the retried error does not stay on a completed job
    assert events(tracker, result.id) == [
        *RAN_ONCE,
        ("retrying", "retrying", 1),
        ("started", "processing", 2),
        ("completed", "completed", 2),
    ]


def test_without_eager_propagation_the_result_holds_the_failure_as_celerys_does(
    proj_app: Celery,
    tasks: ModuleType,
    tracker: Tracker,
    plain_parse: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(proj_app.conf, "task_eager_propagates", False)
    tracked, plain = tasks.parse_int.delay("x"), plain_parse.delay("x")
    for result in (tracked, plain):
        assert isinstance(result, EagerResult)
        assert (result.state, result.failed(), result.ready()) == ("FAILURE", True, True)
        assert type(result.result) is ValueError
        assert str(result.result) == "invalid literal for int() with base 10: 'x'"
        assert result.traceback is not None and "ValueError" in result.traceback
        assert result.get(propagate=False) is result.result
        with pytest.raises(ValueError, match="invalid literal"):
            result.get()
    job = tracker.get_job(tracked.id)
    assert job is not None and (job.status, job.error_type) == (JobStatus.FAILED, "ValueError")
    assert events(tracker, tracked.id) == [*RAN_ONCE, ("failed", "failed", 1)]


def test_an_idempotency_key_duplicate_returns_the_same_job(
    tasks: ModuleType, tracker: Tracker
) -> None:
    document = new_id()
    first = tasks.ocr.delay(document)
    assert first.get() == {"document_id": document, "pages": 3}
    again = tasks.ocr.delay(document, pages=9)  # same key: not run again
    assert isinstance(again, EagerResult)
    assert (again.id, again.get()) == (first.id, {"document_id": document, "pages": 3})
    duplicate = tasks.ocr.enqueue(document)
    assert (duplicate.job_id, duplicate.created, duplicate.status) == (
        first.id,
        False,
        JobStatus.COMPLETED,
    )
    job = tracker.get_job(first.id)
    assert job is not None and job.idempotency_key == f"ocr:{document}"
    assert (job.status, job.attempts_made) == (JobStatus.COMPLETED, 1)
    assert events(tracker, first.id) == [*RAN_ONCE, ("completed", "completed", 1)]  # once

    key = f"sum:{document}"  # a key given per call, on a task without a template
    one = tasks.add.apply_async((1, 2), idempotency_key=key)
    other = tasks.add.apply_async((5, 5), idempotency_key=key)
    assert (other.id, other.get()) == (one.id, 3)


def test_a_duplicate_of_a_failed_job_is_not_run_and_its_result_says_failed(
    tasks: ModuleType, tracker: Tracker
) -> None:
    key = f"parse:{new_id()}"
    with pytest.raises(ValueError):
        tasks.parse_int.apply_async(("x",), idempotency_key=key)
    again = tasks.parse_int.apply_async(("42",), idempotency_key=key)  # not run: no raise
    assert isinstance(again, EagerResult) and again.failed()
    with pytest.raises(JobFailed):
        again.get()
    job = tracker.get_job(again.id)
    assert job is not None and (job.status, job.attempts_made) == (JobStatus.FAILED, 1)
    assert events(tracker, again.id) == [*RAN_ONCE, ("failed", "failed", 1)]


def test_a_task_enqueueing_another_runs_it_inline_and_records_the_lineage(
    tasks: ModuleType, tracker: Tracker
) -> None:
    document = new_id()
    parent = tasks.scan.delay(document)
    child_id = parent.get()
    assert child_id != parent.id
    child = tracker.get_job(child_id)
    seen = [(j.id, j.status.value, j.idempotency_key) for j in tracker.jobs(limit=20).jobs]
    assert child is not None, (child_id, parent.id, seen, events(tracker, parent.id))
    assert child.status is JobStatus.COMPLETED
    assert child.result == {"document_id": document, "pages": 3}
    assert (child.parent_job_id, child.correlation_id) == (parent.id, parent.id)
    job = tracker.get_job(parent.id)
    assert job is not None and (job.status, job.result) == (JobStatus.COMPLETED, child_id)
    assert events(tracker, child_id) == [*RAN_ONCE, ("completed", "completed", 1)]


def test_a_chain_runs_inline_step_by_step(tasks: ModuleType, tracker: Tracker) -> None:
    result = chain(tasks.add.s(1, 2), tasks.add.s(3)).delay()
    assert isinstance(result, EagerResult)
    assert result.get() == 6
    assert result.parent is not None and result.parent.get() == 3
    for step, value in ((result.parent, 3), (result, 6)):
        job = tracker.get_job(step.id)
        assert job is not None and (job.status, job.result) == (JobStatus.COMPLETED, value)


# -- the project's own test suite, in a pytest of its own -----------------------------


def run_project_suite(environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m pytest`` in the project's folder (its ``pytest.ini``, its ``tests/``)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_TRACKED_", "PROJ_", "PYTEST_")) and k != "REDIS_URL"
    }
    env.update(environ)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=str(PROJ_ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize("services", ["postgres+redis", "embedded"])
def test_the_projects_own_eager_test_suite_passes(
    services: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if services == "postgres+redis":
        redis_url = request.getfixturevalue("redis_url")
        environ = {
            "PROJ_DATABASE_URL": request.getfixturevalue("postgres_url"),  # no tables yet
            "PROJ_REDIS_URL": redis_url,
            "PROJ_BROKER_URL": redis_url,
        }
    else:  # the defaults of an embedded test: memory:// broker and guard, SQLite
        environ = {"PROJ_DATABASE_URL": f"sqlite:///{tmp_path / 'proj.sqlite3'}"}
    run = run_project_suite(environ)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    summary = output.strip().splitlines()[-1]  # "6 passed in 0.31s": nothing else
    assert re.fullmatch(rf"{PROJECT_TESTS} passed in [0-9.]+s", summary), output
