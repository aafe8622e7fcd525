"""Worker start: settings validated, loud warning when Redis may evict guard keys."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import migrated_sqlite, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def evicting_redis(tmp_path: Path, redis_available: None) -> Iterator[str]:
    """A second, private redis-server whose policy evicts keys."""
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
            "--maxmemory-policy",
            "allkeys-lru",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _port_open(port), what="private redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def start_worker(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    (tmp_path / "startapp.py").write_text(
        textwrap.dedent(
            """
            from celery import Celery
            from celery_tracked import tracked_task

            app = Celery("startapp", broker="memory://")

            @tracked_task(app=app, queue="start_q")
            def noop() -> None: ...
            """
        )
    )
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "startapp",
                "worker",
                "-P",
                "solo",
                "-Q",
                "start_q",
                "-l",
                "info",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(tmp_path), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_warns_loudly_when_redis_can_evict(
    tmp_path: Path, evicting_redis: str, sqlite_template: Path
) -> None:
    # a migrated database: a worker refuses to start on one without the tables
    sqlite_url = migrated_sqlite(sqlite_template, tmp_path / "tracked.sqlite3")
    proc, log = start_worker(
        tmp_path,
        {"CELERY_TRACKED_REDIS_URL": evicting_redis, "CELERY_TRACKED_DATABASE_URL": sqlite_url},
    )
    try:
        text = wait_for(
            lambda: "maxmemory-policy=allkeys-lru" in log.read_text() and log.read_text(),
            timeout=30,
            what="the eviction warning",
        )
        assert "EVICTED" in text and "noeviction" in text
    finally:
        stop(proc)


def test_a_bad_setting_stops_the_worker_and_names_it(tmp_path: Path, sqlite_url: str) -> None:
    proc, log = start_worker(
        tmp_path,
        {
            "CELERY_TRACKED_REDIS_URL": "memory://",
            "CELERY_TRACKED_DATABASE_URL": sqlite_url,
            "CELERY_TRACKED_DEFAULT_ATTEMPTS": "zero",
        },
    )
    try:
        wait_for(lambda: proc.poll() is not None, timeout=30, what="the worker to exit")
        text = log.read_text()
        assert proc.returncode != 0
        assert "tracked_default_attempts" in text
    finally:
        stop(proc)
