"""Acceptance: a completion that meets a database outage longer than its re-sends (issue
12, item 16; docs/lifecycle.md, "Where the work happens", step 5).

The test's PostgreSQL is a PRIVATE cluster (``initdb`` + ``pg_ctl`` on a port of its own,
torn down with the test): stopping it never touches the shared server.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from celery_tracked import JobStatus
from celery_tracked.store import migrate
from tests.conftest import _require, wait_for
from tests.own_services import free_port

PG_BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None)


def _free_port() -> int:
    return free_port()  # the kernel's choice: no race between parallel test processes


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of this test only."""

    base: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        assert PG_BIN is not None
        command = [str(PG_BIN / "pg_ctl"), "-D", str(self.base / "data"), "-w", *args]
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *command],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.base / "log"), "start")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: an outage (committed work kept, every connection ended); ``immediate``:
        a crash (what was committed asynchronously, a claim, may be lost)."""
        self._ctl("-m", mode, "stop")


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    _require(PG_BIN is not None and shutil.which("runuser") is not None, "initdb/pg_ctl")
    base = Path(tempfile.mkdtemp(prefix="ct-private-pg-"))
    shutil.chown(base, "postgres")
    assert PG_BIN is not None
    initdb = [str(PG_BIN / "initdb"), "-D", str(base / "data"), "-U", "postgres"]
    subprocess.run(
        ["runuser", "-u", "postgres", "--", *initdb, "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster = PrivatePostgres(base, _free_port())
    cluster.start()
    try:
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_database_url(private_postgres: PrivatePostgres) -> str:
    """The test's app and workers use the private cluster (``env`` reads this fixture)."""
    migrate.upgrade(private_postgres.url)
    return private_postgres.url


def test_a_completion_lost_to_a_database_outage_is_recorded_retrying_when_it_answers(
    env: Any, start_worker: Any, private_postgres: PrivatePostgres
) -> None:
    """The body of a job's only attempt returned while the database was down for longer
    than the completion's re-sends: the attempt is recorded ``retrying`` (StoreError) once
    the database answers, and the next attempt runs the body again and completes, past
    ``max_attempts``. It is never acknowledged as done without the write, never waits for
    its own lease to lapse, and is not failed as a "lost" last attempt."""
    worker = start_worker(concurrency=1)
    warm = env.task("acc.succeed").enqueue(x="warm").job_id  # the worker's connections exist
    env.wait_status(warm, "completed", timeout=30)
    job_id = env.task("acc.hold").with_options(max_attempts=1)(x="outage").job_id
    wait_for(lambda: env.redis.exists(f"holding:{job_id}"), timeout=20, what="the body to start")

    private_postgres.stop()
    try:
        env.redis.set(f"go:{job_id}", 1)  # the body returns now, into the outage
        wait_for(
            lambda: "could not record retrying" in worker.log(),
            timeout=40,
            what="the completion's re-sends, then the retrying write, to fail",
        )
    finally:
        private_postgres.start()

    job = env.wait_status(job_id, "completed", "failed", timeout=40)
    history = env.tracker.history(job_id)
    story = "\n".join(f"{e.event} {e.attempt} {e.message}" for e in history)
    assert job.status is JobStatus.COMPLETED, story
    assert (job.attempts_made, job.max_attempts, env.ran(job_id)) == (2, 1, 2), story
    assert [e.event for e in history] == [
        "enqueued",
        "started",
        "retrying",
        "started",
        "completed",
    ], story
    assert "StoreError" in history[2].message and history[2].attempt == 1
    assert not any("lost" in (e.message or "") for e in history), story
