"""Migrations equal the models; upgrade/downgrade round trips; the wheel ships them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from celery_tracked.core.fences import Completion, Lease
from celery_tracked.store import migrate
from celery_tracked.store.models import metadata

from ..conftest import ROOT


@pytest.fixture(params=["postgres", "sqlite", "mariadb"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database, on PostgreSQL, SQLite and MariaDB."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'm.sqlite3'}"
    return str(request.getfixturevalue(f"{request.param}_url"))


def diff(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "compare_type": True,
                    "include_object": lambda obj, name, type_, *_: (
                        not (type_ == "table" and name not in metadata.tables)
                    ),
                },
            )
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_migrations_equal_the_models(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    assert diff(empty_url) == []


def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    assert {"background_jobs", "background_job_events"} <= tables(empty_url)
    assert "celery_tracked_alembic_version" in tables(empty_url)
    migrate.downgrade(empty_url, "base")
    assert not {"background_jobs", "background_job_events"} & tables(empty_url)
    migrate.upgrade(empty_url)
    assert diff(empty_url) == []


def test_coexists_with_the_host_apps_alembic(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num varchar(32) primary key)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('host_rev_1')"))
        conn.execute(text("CREATE TABLE host_things (id int primary key)"))
    migrate.upgrade(postgres_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == (
            "host_rev_1"
        )
    assert "host_things" in tables(postgres_url)
    engine.dispose()


def test_migrate_command_from_the_built_wheel(tmp_path: Path, postgres_url: str) -> None:
    """`celery -A app tracked migrate` in a fresh virtualenv from the wheel (not editable)."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    wheel = next(dist.glob("celery_tracked-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"{wheel}[postgres]"], check=True, capture_output=True)
    app_dir = tmp_path / "proj"
    app_dir.mkdir()
    (app_dir / "proj.py").write_text(
        textwrap.dedent(
            """
            from celery import Celery
            app = Celery("proj", broker="memory://")
            app.conf.tracked_redis_url = "memory://"
            """
        )
    )
    env = {
        **os.environ,
        "CELERY_TRACKED_DATABASE_URL": postgres_url,
        "PYTHONPATH": str(app_dir),
    }
    out = subprocess.run(
        [str(venv / "bin" / "celery"), "-A", "proj", "tracked", "migrate"],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "head" in out.stdout
    assert {"background_jobs", "background_job_events"} <= tables(postgres_url)
    shipped = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import celery_tracked.store.migrate as m; print(m.migrations_dir())",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "site-packages" in shipped


def test_store_round_trip_on_mariadb(mariadb_url: str) -> None:
    """The portable types and the generic (no RETURNING) statements work on MariaDB."""

    from celery_tracked import JobStatus
    from celery_tracked.core.jobs import utcnow
    from celery_tracked.store import JobStore

    migrate.upgrade(mariadb_url)
    store = JobStore(mariadb_url)
    try:
        now = utcnow()
        store.insert(
            {
                "id": "job-1",
                "queue_name": "q",
                "job_type": "t",
                "task_name": "t",
                "celery_task_id": "job-1",
                "status": "pending",
                "payload_json": "{}",
                "max_attempts": 3,
                "idempotency_key": "k",
                "correlation_id": "job-1",
                "parent_job_id": None,
                "owner_id": None,
                "created_at": now,
                "updated_at": now,
            }
        )
        claim = store.claim("job-1", Lease(owner="h:1", worker="w", now=utcnow(), lease_s=9))
        assert claim is not None and claim.attempt == 1
        assert store.complete(
            claim, Completion(result_json='{"ok":true}', now=utcnow(), duration_ms=1)
        )
        job = store.get("job-1")
        assert job is not None and job.status is JobStatus.COMPLETED
        assert job.created_at == now, "microseconds and UTC survive the round trip"
        assert [e.event for e in store.events("job-1")] == ["enqueued", "started", "completed"]
    finally:
        store.dispose()


def test_rerun_moves_on_mariadb(mariadb_url: str) -> None:
    """``Tracker.retry``'s move reads its own table in a subquery (a newer job holding the
    key), which MariaDB allows in an UPDATE; debounce's compare-and-set too."""
    from celery_tracked import JobStatus
    from celery_tracked.core.jobs import utcnow
    from celery_tracked.store import JobStore

    migrate.upgrade(mariadb_url)
    store = JobStore(mariadb_url)
    try:
        now = utcnow()
        row = {
            "queue_name": "q",
            "job_type": "t",
            "task_name": "t",
            "status": "pending",
            "payload_json": "{}",
            "max_attempts": 1,
            "idempotency_key": "k",
            "correlation_id": "c",
            "parent_job_id": None,
            "owner_id": None,
            "created_at": now,
            "updated_at": now,
        }
        store.insert({**row, "id": "job-1", "celery_task_id": "job-1"})
        assert store.replace_arguments(
            "job-1", seen_revision=0, payload_json='{"n": 1}', now=now, message="m"
        )
        assert store.cancel("job-1", now=utcnow(), reason="c")
        assert store.retry("job-1", seen_revision=1, budget=1, now=utcnow(), message="r")
        job = store.get("job-1")
        assert job is not None and (job.status, job.revision) == (JobStatus.PENDING, 2)
        assert store.cancel("job-1", now=utcnow(), reason="c")
        store.insert({**row, "id": "job-2", "celery_task_id": "job-2", "key_round": 1})
        assert not store.retry("job-1", seen_revision=2, budget=1, now=utcnow(), message="r")
    finally:
        store.dispose()
