"""Acceptance (issue 16): a real Django project (``tests/django_proj``) with a tracked task.

The project is laid out as Celery's Django guide says: ``app.config_from_object(
"django.conf:settings", namespace="CELERY")``, the tracking URL derived from Django's
``DATABASES`` (``celery_tracked.contrib.django.database_url``), a tracked task enqueued
from a view inside ``transaction.on_commit``. Django's migrations and ``tracked migrate``
create the tables on a fresh PostgreSQL database, a real ``celery worker`` runs the job,
and Django's test client posts to the view (in a process of its own: Django is set up
there, not in this test run). A transaction that rolls back creates no job.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from celery_tracked import JobStatus, Tracker
from tests.conftest import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

PROJ = Path(__file__).resolve().parent.parent / "django_proj"
CELERY = [sys.executable, "-m", "celery", "-A", "djproj"]
QUIET = ["--without-mingle", "--without-gossip", "--without-heartbeat"]


@pytest.fixture
def environ(postgres_url: str, redis_url: str) -> dict[str, str]:
    """The project's services as its deployment gives them (``DJPROJ_*``)."""
    url = make_url(postgres_url)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_TRACKED_", "DJANGO_", "PYTEST_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="djproj.settings",
        DJPROJ_DB_NAME=url.database or "",
        DJPROJ_DB_USER=url.username or "",
        DJPROJ_DB_PASSWORD=url.password or "",
        DJPROJ_DB_HOST=url.host or "",
        DJPROJ_DB_PORT=str(url.port or ""),
        DJPROJ_REDIS_URL=redis_url,
    )
    return env


def run(environ: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=str(PROJ),
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def worker(environ: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*CELERY, "worker", "-P", "solo", "-Q", "djproj", "-l", "info", *QUIET],
            cwd=str(PROJ),
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: " ready." in log_path.read_text() or proc.poll() is not None,
                timeout=30,
                what="the Django project's worker to be ready",
            )
            assert proc.poll() is None, log_path.read_text()
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            print(log_path.read_text()[-10000:])  # shown when the test failed


@pytest.fixture
def migrated(environ: dict[str, str]) -> None:
    """The project's own tables (Django's ``migrate``) and the tracking tables (``tracked
    migrate``), both at once: they are independent."""
    with ThreadPoolExecutor(2) as pool:
        done = [
            pool.submit(run, environ, "-m", "django", "migrate", "--no-input"),
            pool.submit(run, environ, *CELERY[1:], "tracked", "migrate"),
        ]
        for future in done:
            future.result()


def test_a_view_enqueues_on_commit_and_a_real_worker_completes_the_job(
    environ: dict[str, str],
    migrated: None,
    worker: subprocess.Popen[bytes],
    postgres_url: str,
    redis_url: str,
) -> None:
    answers = json.loads(run(environ, "client.py"))

    placed = answers["book"]
    assert placed["status"] == 201, answers
    job_id = placed["body"]["job_id"]
    order_id = placed["body"]["order_id"]
    app = Celery("django-proj-test", set_as_current=False)
    app.conf.update(tracked_database_url=postgres_url, tracked_redis_url=redis_url)
    tracker = Tracker.for_app(app)
    try:
        assert tracker.wait(job_id, timeout=30) == {"order_id": order_id, "status": "confirmed"}
        job = tracker.get_job(job_id)
        assert job is not None and job.status is JobStatus.COMPLETED
        assert (job.task_name, job.queue_name) == ("shop.tasks.confirm_order", "djproj")
        assert (job.idempotency_key, job.attempts_made) == (f"confirm:{order_id}", 1)
        assert [e.event for e in tracker.history(job_id)] == ["enqueued", "started", "completed"]
    finally:
        tracker.close()
        app.close()

    # the rolled-back transaction: 409, no order row, no job
    assert answers["refused"] == {"status": 409, "body": {"error": "refused"}}
    engine = create_engine(postgres_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            orders = conn.execute(text("SELECT item, status FROM shop_order")).all()
            jobs = conn.execute(text("SELECT id FROM background_jobs")).all()
    finally:
        engine.dispose()
    assert [tuple(row) for row in orders] == [("book", "confirmed")]  # written by the worker
    assert [str(row[0]) for row in jobs] == [job_id]


def test_the_dashboard_mounted_beside_django_lets_staff_in_and_superusers_act(
    environ: dict[str, str], migrated: None
) -> None:
    """docs/dashboard.md's Django recipe (``djproj/asgi.py``): a superuser signed in to
    Django reads and acts (recorded under their username), a staff user reads and is 403
    on an action, anyone else is 401."""
    answers = json.loads(run(environ, "dashboard_client.py"))
    assert answers["ada"] == {"page": 200, "shows_name": True, "cancel": 200}, answers
    assert answers["bob"] == {"page": 200, "shows_name": True, "cancel": 403}, answers
    for name in ("eve", "nobody"):
        assert answers[name] == {"page": 401, "shows_name": False, "cancel": 401}, answers
    assert answers["log"] == {"actors": ["ada"], "status": "cancelled"}, answers
