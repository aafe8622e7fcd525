"""Issue 12, item 1: an enqueue that returned ``created=True`` has its row, even after a
server crash on a server whose default is ``synchronous_commit=off``.

Starts its OWN PostgreSQL cluster (``initdb`` in a temporary directory, a private port,
``synchronous_commit=off``) and crashes it with ``pg_ctl stop -m immediate`` while real
producer processes enqueue in a loop; the shared server is never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from celery_tracked.store import migrate
from tests.conftest import wait_for
from tests.private_services import private_postgres

HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.own_postgres, pytest.mark.postgres, pytest.mark.redis]

#: An asynchronous commit returns before its WAL is written; the WAL writer waits up to
#: this long before writing it (the default 200 ms also loses jobs, just fewer of them).
CRASHY = {"synchronous_commit": "off", "wal_writer_delay": "10s", "shared_buffers": "32MB"}
PRODUCERS = 3
#: Each crash loses the commits still in the last unwritten WAL page: 1 to 3 jobs per
#: crash on today's main with three producers; three crashes make a miss unlikely.
CRASHES = 3
#: Enqueues each producer makes between two crashes.
BATCH = 50


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_every_created_enqueue_survives_a_server_crash(redis_url: str, tmp_path: Path) -> None:
    with private_postgres(CRASHY) as cluster:
        admin = create_engine(cluster.url(), isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with admin.connect() as conn:
            conn.execute(text("CREATE DATABASE tracked"))
        admin.dispose()
        url = cluster.url("tracked")
        migrate.upgrade(url)
        stop = tmp_path / "stop"
        outs = [tmp_path / f"created-{i}.txt" for i in range(PRODUCERS)]
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "durable_producer.py"),
                    url,
                    redis_url,
                    str(out),
                    str(stop),
                ],
                env=environ,
                stderr=subprocess.DEVNULL,
            )
            for out in outs
        ]

        def enqueueing() -> None:  # every producer makes BATCH more jobs
            seen = [len(lines(out)) for out in outs]
            for out, before in zip(outs, seen, strict=True):
                wait_for(lambda o=out, b=before: len(lines(o)) >= b + BATCH, timeout=30)

        try:
            for _ in range(CRASHES):
                enqueueing()
                cluster.crash()  # while every producer is enqueueing
                cluster.start()
            enqueueing()  # and they go on after the restart
        finally:
            stop.touch()
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        created = [job_id for out in outs for job_id in lines(out)]
        engine = create_engine(url, poolclass=NullPool)
        with engine.connect() as conn:
            conn.execute(text("CREATE TEMP TABLE created (id text)"))
            conn.execute(text("INSERT INTO created VALUES (:id)"), [{"id": i} for i in created])
            lost = conn.execute(
                text(
                    "SELECT c.id FROM created c LEFT JOIN background_jobs j ON j.id = c.id "
                    "WHERE j.id IS NULL"
                )
            ).all()
            events = conn.execute(
                text(
                    "SELECT count(*) FROM created c JOIN background_job_events e "
                    "ON e.job_id = c.id AND e.event = 'enqueued'"
                )
            ).scalar()
        engine.dispose()
        assert len(created) >= PRODUCERS * CRASHES * BATCH
        assert [r[0] for r in lost] == [], f"{len(lost)} of {len(created)} created jobs lost"
        assert events == len(created)  # and each its ``enqueued`` event
