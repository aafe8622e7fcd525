"""Issue 22, items 5 and 6: what a real ``celery worker`` says at start.

- a misspelled ``tracked_*`` setting (``app.conf`` or ``CELERY_TRACKED_*``) stops it with
  the closest known name, instead of silently tracking jobs in the SQLite default;
- on the embedded SQLite default with a shared broker, a WARNING names the file's
  absolute path (two directories, two files: a split brain seen at once);
- against a database without the tables (or behind this version's head revision) it
  exits non-zero saying what to run, instead of failing every job later.

Each worker runs a tiny app of its own from a temporary directory (the SQLite default is
a file of the current directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from celery_tracked import migrate

APP = """
import os
from celery import Celery
from celery_tracked import tracked_task

app = Celery("startcheck", broker=os.environ["START_BROKER"])
app.conf.update(
    tracked_redis_url=os.environ["START_REDIS"],
    task_default_queue="startcheck",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
)
for name, value in os.environ.items():
    if name.startswith("START_CONF_"):
        app.conf[name[len("START_CONF_"):].lower()] = value


@tracked_task(app=app, name="startcheck.noop")
def noop():
    return 1
"""

CELERY = str(Path(sys.executable).parent / "celery")
WORKER = [CELERY, "-A", "startcheck", "worker", "-P", "solo", "-l", "info", "-Q", "startcheck"]
#: a worker that exits at start does so within this many seconds; one that starts, too
START_S = 60


def run_worker(
    directory: Path, redis_url: str, extra: dict[str, str], expect_exit: bool
) -> tuple[int | None, str]:
    """Start ``celery worker`` on the app in ``directory``; return ``(exit code or None if
    it was still running once ready, its log)``."""
    (directory / "startcheck.py").write_text(APP)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_TRACKED_")}
    environ.update(
        START_BROKER=redis_url, START_REDIS=redis_url, PYTHONPATH=str(directory), **extra
    )
    log_path = directory / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*WORKER, "--without-mingle", "--without-gossip", "--without-heartbeat"],
            cwd=str(directory),
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            if expect_exit:
                return proc.wait(timeout=START_S), log_path.read_text(errors="replace")
            from tests.conftest import wait_for

            wait_for(
                lambda: (
                    " ready." in log_path.read_text(errors="replace") or proc.poll() is not None
                ),
                timeout=START_S,
                what="the worker to be ready",
            )
            return proc.poll(), log_path.read_text(errors="replace")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)


def test_misspelled_setting_stops_the_worker(redis_url: str, tmp_path: Path) -> None:
    """``app.conf.tracked_db_url`` (the issue's case): exit non-zero, the closest name
    given; no SQLite file was created."""
    code, log = run_worker(
        tmp_path, redis_url, {"START_CONF_TRACKED_DB_URL": "sqlite:///x.sqlite3"}, True
    )
    assert code not in (None, 0), log
    assert "tracked_db_url" in log and "did you mean 'tracked_database_url'?" in log, log
    assert log.count("did you mean") == 1 and "[CRITICAL]" in log, log  # said once
    assert not list(tmp_path.glob("*.sqlite3"))


def test_misspelled_environment_variable_stops_the_worker(redis_url: str, tmp_path: Path) -> None:
    code, log = run_worker(tmp_path, redis_url, {"CELERY_TRACKED_DATABASE_URI": "x://"}, True)
    assert code not in (None, 0), log
    assert "did you mean 'CELERY_TRACKED_DATABASE_URL'?" in log, log


def test_embedded_sqlite_default_is_named_and_unmigrated_refused(
    redis_url: str, tmp_path: Path
) -> None:
    """No ``tracked_database_url``: first the file has no tables: the worker exits saying
    to run ``tracked migrate`` (item 6; no empty file left behind); once migrated it starts
    and warns with the file's absolute path, the broker being Redis (item 5)."""
    code, log = run_worker(tmp_path, redis_url, {}, True)
    assert code not in (None, 0), log
    assert "celery-tracked tables are missing" in log and "tracked migrate" in log, log
    assert not (tmp_path / "celery_tracked.sqlite3").exists()

    migrate.upgrade(f"sqlite:///{tmp_path / 'celery_tracked.sqlite3'}")
    code, log = run_worker(tmp_path, redis_url, {}, False)
    assert code is None, log
    warning = [line for line in log.splitlines() if "embedded SQLite default" in line]
    assert warning and "WARNING" in warning[0], log
    assert str((tmp_path / "celery_tracked.sqlite3").resolve()) in warning[0]


def test_postgres_without_the_tables_or_behind_head_is_refused(
    redis_url: str, postgres_url: str, tmp_path: Path
) -> None:
    """An empty PostgreSQL database: exit non-zero naming the command and the (masked)
    database; one migrated to an older revision only: refused too, naming the revisions;
    at head: the worker starts and says nothing of the schema."""
    extra = {"START_CONF_TRACKED_DATABASE_URL": postgres_url}
    code, log = run_worker(tmp_path, redis_url, extra, True)
    assert code not in (None, 0), log
    said = "celery-tracked tables are missing: run `celery -A startcheck tracked migrate`"
    assert log.count(said) == 1 and "[CRITICAL]" in log, log  # once, the app's own name

    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config(postgres_url))
    head = script.get_current_head()
    older = script.get_revision(head).down_revision
    if older is None:
        pytest.skip("one migration only: no older revision to try")
    migrate.upgrade(postgres_url, str(older))
    code, log = run_worker(tmp_path, redis_url, extra, True)
    assert code not in (None, 0), log
    assert f"this version needs {head}" in log, log

    migrate.upgrade(postgres_url)
    code, log = run_worker(tmp_path, redis_url, extra, False)
    assert code is None, log
    assert "tables are" not in log and "embedded SQLite" not in log
