"""Acceptance: ordinary production faults around a running job (issue 6).

A paused pool child whose lease lapses, a duplicate copy of a message, a connection that
dies while the body runs (idle timeout, server restart).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from celery_tracked import JobStatus
from celery_tracked.services.lease import process_alive
from tests.conftest import pg_admin_url, pg_server, wait_for

LEASE_S = 2.0


def steps_of(env: Any, job_id: str) -> list[tuple[int, int, float]]:
    """``(pid, run, time)`` of every step the ``acc.stepper`` bodies took."""
    out = []
    for raw in env.redis.lrange(f"steps:{job_id}", 0, -1):
        pid, run, at = raw.decode().split()
        out.append((int(pid), int(run), float(at)))
    return out


def run_pid(env: Any, job_id: str, run: int) -> int:
    found = wait_for(
        lambda: env.redis.get(f"pid:{job_id}:{run}"), timeout=20, what=f"run {run}'s pid"
    )
    return int(found)


@pytest.mark.parametrize("lease_seconds", [LEASE_S])
def test_a_paused_run_whose_lease_was_taken_over_stops_before_its_next_step(
    env: Any, start_worker: Any
) -> None:
    """SIGSTOP past the lease, a copy of the message takes over; after SIGCONT the paused
    run takes no further step and writes nothing; the job completes once."""
    start_worker(concurrency=2)
    job_id = env.task("acc.stepper").enqueue(x="pause", steps=30).job_id
    first = run_pid(env, job_id, 1)
    wait_for(lambda: len(steps_of(env, job_id)) >= 3, timeout=20, what="run 1 to take steps")

    os.kill(first, signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        env.redeliver("acc.stepper", job_id, x="pause", steps=30)
        wait_for(
            lambda: any(run == 2 for _, run, _ in steps_of(env, job_id)),
            timeout=30,
            what="the copy to take over and step",
        )
        # paused well past the lease: the paused run can no longer prove it holds it
        time.sleep(max(0.0, 2 * LEASE_S - (time.monotonic() - paused_at)))
    finally:
        resumed_at = time.time()
        os.kill(first, signal.SIGCONT)

    wait_for(lambda: not process_alive(first), timeout=10, what="the paused run to stop")
    late = [at for pid, _, at in steps_of(env, job_id) if pid == first and at >= resumed_at]
    assert late == [], "the paused run took steps after it was resumed"

    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 2
    assert job.result == {"x": "pause", "run": 2}
    history = env.tracker.history(job_id)
    assert [e.event for e in history] == ["enqueued", "started", "redelivered", "completed"]
    assert [e.attempt for e in history] == [0, 1, 2, 2]


@pytest.mark.parametrize("lease_seconds", [LEASE_S])
def test_a_pause_shorter_than_the_lease_changes_nothing(env: Any, start_worker: Any) -> None:
    worker = start_worker(concurrency=2)
    job_id = env.task("acc.stepper").enqueue(x="short", steps=20).job_id
    first = run_pid(env, job_id, 1)
    wait_for(lambda: len(steps_of(env, job_id)) >= 3, timeout=20, what="run 1 to take steps")

    os.kill(first, signal.SIGSTOP)
    try:
        env.redeliver("acc.stepper", job_id, x="short", steps=20)
        time.sleep(LEASE_S / 4)  # the pause itself: well inside the lease
    finally:
        os.kill(first, signal.SIGCONT)

    job = env.wait_status(job_id, "completed", "failed", timeout=30)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 1
    assert env.ran(job_id) == 1
    assert {pid for pid, _, _ in steps_of(env, job_id)} == {first}
    assert len(steps_of(env, job_id)) == 20
    assert process_alive(first)
    wait_for(lambda: worker.records_of(job_id, "skipped"), timeout=20, what="the copy skipped")
    assert [e.event for e in env.tracker.history(job_id)] == ["enqueued", "started", "completed"]


# -- a completion is not lost to a dead connection ---------------------------------------


def alter_database(env: Any, setting: str, value: str) -> None:
    """``ALTER DATABASE <the test's database> SET``: new sessions of this database only."""
    database = env.database_url.rsplit("/", 1)[1]
    admin = create_engine(pg_admin_url(), poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" SET {setting} = {value}'))
    finally:
        admin.dispose()


def test_an_idle_session_timeout_shorter_than_the_body_costs_no_attempt(
    env: Any, start_worker: Any
) -> None:
    """PostgreSQL ends the worker's idle connection while the body runs: the completion is
    re-sent on a fresh one; the body ran once."""
    alter_database(env, "idle_session_timeout", "'1500ms'")
    start_worker(concurrency=1)
    warm = env.task("acc.succeed").enqueue(x="warm").job_id  # the worker's connections exist
    env.wait_status(warm, "completed", timeout=30)

    job_id = env.task("acc.succeed").enqueue(x="idle", sleep=3.0).job_id

    job = env.wait_status(job_id, "completed", "failed", timeout=40)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 1
    assert env.ran(job_id) == 1
    assert [e.event for e in env.tracker.history(job_id)] == ["enqueued", "started", "completed"]


def pg_cluster() -> tuple[str, str]:
    versions = sorted(os.listdir("/etc/postgresql"))
    return versions[-1], "main"


def pg_ready() -> bool:
    url = make_url(pg_admin_url())
    found = subprocess.run(
        ["pg_isready", "-h", url.host or "127.0.0.1", "-p", str(url.port or 5432)],
        capture_output=True,
    )
    return found.returncode == 0


def restart_postgresql() -> None:
    """Restart the tests' PostgreSQL: the suite's private cluster; a server named by
    TEST_POSTGRES_URL only with TEST_ALLOW_PG_RESTART=1 (its Debian cluster)."""
    server = pg_server()
    if server is not None:
        server.restart()
        return
    if os.environ.get("TEST_ALLOW_PG_RESTART") != "1":
        pytest.skip("restarts PostgreSQL: not a server the suite owns (TEST_ALLOW_PG_RESTART=1)")
    version, cluster = pg_cluster()
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster]
    try:
        subprocess.run([*command, "restart", "-m", "fast"], check=True, timeout=60)
    finally:
        if not pg_ready():
            subprocess.run([*command, "start"], check=False, timeout=60)


@pytest.mark.pg_restart
@pytest.mark.parametrize("lease_seconds", [30.0])  # the restart must not outlast the proof
def test_a_postgresql_restart_during_the_body_costs_no_attempt(env: Any, start_worker: Any) -> None:
    start_worker(concurrency=1)
    warm = env.task("acc.succeed").enqueue(x="warm").job_id  # the worker's connections exist
    env.wait_status(warm, "completed", timeout=30)
    job_id = env.task("acc.hold").enqueue(x="restart").job_id
    wait_for(lambda: env.redis.exists(f"holding:{job_id}"), timeout=20, what="the body to start")

    try:
        restart_postgresql()
    finally:
        wait_for(pg_ready, timeout=60, what="PostgreSQL to be back")
    env.redis.set(f"go:{job_id}", 1)

    job = env.wait_status(job_id, "completed", "failed", timeout=40)
    assert job.status is JobStatus.COMPLETED
    assert job.attempts_made == 1
    assert env.ran(job_id) == 1
    assert [e.event for e in env.tracker.history(job_id)] == ["enqueued", "started", "completed"]
