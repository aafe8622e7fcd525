"""Acceptance: a producer killed between insert and publish, a producer whose publish
fails while a duplicate waits (issue 6, item 4). Real producer processes (SIGKILL), a real
``celery worker`` and a real ``celery beat`` running the relay's default entry."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, worker_environ

from celery_tracked import EnqueueError, JobStatus
from tests.conftest import wait_for

#: A producer that stops inside Celery's publish, after its row was inserted: it writes
#: ``<marker>`` then either sleeps (to be SIGKILLed) or, once ``<marker>.go`` exists,
#: fails the publish.
PRODUCER = """
import os, sys, time
from celery.app.task import Task
from tracked_app import config_from_env, create_app

marker, key, mode = sys.argv[1:4]

def publish(self, *args, **kwargs):
    open(marker, "w").close()
    if mode == "hang":
        time.sleep(600)
    while not os.path.exists(marker + ".go"):
        time.sleep(0.01)
    time.sleep(0.5)  # the duplicate is waiting on this row now
    raise ConnectionError("broker went away")

Task.apply_async = publish
app = create_app(config_from_env())
try:
    app.tasks["acc.keyed"].enqueue(x=key)
except Exception as exc:
    print(type(exc).__name__, exc)
    sys.exit(3)
"""

FAST_RELAY = {
    "CELERY_TRACKED_RELAY_GRACE_SECONDS": "1",
    "CELERY_TRACKED_RELAY_INTERVAL_SECONDS": "1",
}


@pytest.fixture
def producer(env: Any, tmp_path: Path) -> Iterator[Callable[[str, str], tuple[Any, Path]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(key: str, mode: str) -> tuple[subprocess.Popen[bytes], Path]:
        marker = tmp_path / f"producer-{key}"
        proc = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, str(marker), key, mode],
            cwd=str(HERE),
            env=worker_environ(env.config),
            start_new_session=True,
        )
        procs.append(proc)
        wait_for(lambda: marker.exists() or proc.poll() is not None, timeout=30)
        assert marker.exists(), "the producer stopped before its publish"
        return proc, marker

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def relay_runs(worker: Any) -> int:
    return worker.log().count("celery_tracked.relay[")


def test_a_producer_killed_between_insert_and_publish_is_relayed_and_runs_once(
    env: Any, start_worker: Any, producer: Any, start_beat: Any
) -> None:
    proc, _ = producer("killed", "hang")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    rows = env.sql("SELECT id, status, published_at FROM background_jobs")
    assert len(rows) == 1 and rows[0][1] == "pending" and rows[0][2] is None
    job_id = rows[0][0]
    assert env.broker_messages() == []
    env.tracker._services.enqueuer.duplicate_wait_s = 0.5
    with pytest.raises(EnqueueError, match="not handed to the broker"):
        env.task("acc.keyed").enqueue(x="killed")  # never a job that would never run

    worker = start_worker(environ=FAST_RELAY)
    beat_log = start_beat(FAST_RELAY)
    job = env.wait_status(job_id, "completed", timeout=60)
    assert job.attempts_made == 1 and job.published_at is not None
    assert "relayed" in [e.event for e in env.tracker.history(job_id)]
    assert "celery_tracked.relay" in beat_log.read_text()
    # the key is no longer blocked: it names the job that ran
    assert env.task("acc.keyed").enqueue(x="killed") == (job_id, JobStatus.COMPLETED, False)
    runs = relay_runs(worker)
    wait_for(lambda: relay_runs(worker) >= runs + 3, timeout=30, what="three more relay runs")
    assert env.ran(job_id) == 1, "relayed once, run once"
    assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1


def test_the_first_producer_fails_its_publish_and_the_waiting_second_gets_a_job_that_runs(
    env: Any, start_worker: Any, producer: Any
) -> None:
    proc, marker = producer("raced", "fail")
    first_id = env.sql("SELECT id FROM background_jobs")[0][0]
    Path(f"{marker}.go").touch()
    second = env.task("acc.keyed").enqueue(x="raced")  # waits for the first's outcome
    assert proc.wait(timeout=30) == 3, "the first producer got EnqueueError"
    assert second.created and second.job_id != first_id
    assert env.tracker.get_job(first_id) is None
    start_worker()
    job = env.wait_status(second.job_id, "completed", timeout=30)
    assert job.attempts_made == 1 and env.ran(second.job_id) == 1
