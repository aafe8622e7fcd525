"""Acceptance: priority on RabbitMQ (issue 26, item 2). A queue of the test's own, declared
with ``x-max-priority``; one ``celery worker`` with ``-c 1``, prefetch 1 and
``task_acks_late``. A backlog of 200 low and 20 high priority jobs: the high ones start
first. A retried and a rescued (the reaper's publish) high priority job keep their priority:
each delivery's priority is read by the body from the message (``delivery_info``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import HERE, ROOT
from prio_app import AMQP, TOP, create_app

from celery_tracked import InvalidPriority, Tracker
from celery_tracked.core.fences import Lease
from celery_tracked.core.jobs import utcnow
from tests.conftest import _port_open, _require, wait_for

LOW, HIGH, RESCUED = 1, 9, 8


@pytest.fixture
def prio(pg_database_url: str, redis_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    _require(_port_open("127.0.0.1", 5672), "RabbitMQ at 127.0.0.1:5672")
    config = {
        "broker": os.environ.get("TRACKED_TEST_AMQP", AMQP),
        "queue": f"prio-{uuid.uuid4().hex[:12]}",
        "database_url": pg_database_url,
        "redis_url": redis_url,
    }
    app = create_app(config)
    with app.connection_for_write() as conn:  # declared now: the backlog waits in it
        app.conf.task_queues[0].bind(conn.default_channel).declare()
    procs: list[subprocess.Popen[bytes]] = []
    log = tmp_path / "worker.log"
    log_file = log.open("wb")

    def start_worker() -> None:
        environ = {
            **os.environ,
            "TRACKED_TEST_AMQP": config["broker"],
            "PRIO_QUEUE": config["queue"],
            "CELERY_TRACKED_DATABASE_URL": pg_database_url,
            "REDIS_URL": redis_url,
            "PYTHONPATH": os.pathsep.join((str(HERE), str(ROOT))),
        }
        cmd = [sys.executable, "-m", "celery", "-A", "prio_app", "worker", "-P", "prefork"]
        cmd += ["-c", "1", "-Q", config["queue"], "-n", f"{config['queue']}@%h", "-l", "info"]
        cmd += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=str(HERE),
                env=environ,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    tracker = Tracker.for_app(app)
    try:
        yield {"app": app, "tracker": tracker, "start_worker": start_worker, "config": config}
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log_file.close()
        with app.connection_for_write() as conn:  # what this test created, deleted
            queue = app.conf.task_queues[0].bind(conn.default_channel)
            queue.delete()
            queue.exchange.delete()
        tracker.close()
        app.close()
        if log.exists():
            print(log.read_text(errors="replace")[-20000:])


def test_high_priority_jobs_start_first_and_keep_their_priority_when_re_sent(
    prio: dict[str, Any],
) -> None:
    app, tracker = prio["app"], prio["tracker"]
    work, flaky = app.tasks["prio.work"], app.tasks["prio.flaky"]
    # a rescued one: its message lost, its run's worker gone; the reaper re-sends it
    rescued = work.apply_async(kwargs={"n": -1}, priority=RESCUED).id
    with app.connection_for_write() as conn:
        assert app.conf.task_queues[0].bind(conn.default_channel).purge() == 1
    dead = Lease(owner="gone:host:0:1", worker="w0@gone", now=utcnow(), lease_s=0.0)
    assert tracker._services.store.claim(rescued, dead) is not None
    until = tracker._services.store.clock() + timedelta(seconds=2)  # past the lease's grace
    wait_for(lambda: tracker._services.store.clock() >= until, timeout=15, interval=0.1)
    wait_for(lambda: rescued in tracker.reap().rescued, timeout=30, interval=0.5)
    assert tracker.get_job(rescued).priority == RESCUED
    # the backlog: 200 low, then 20 high, then a high one that fails once
    low = [work.apply_async(kwargs={"n": i}, priority=LOW).id for i in range(200)]
    high = [work.apply_async(kwargs={"n": i}, priority=HIGH).id for i in range(20)]
    retried = flaky.apply_async(kwargs={"n": 0}, priority=HIGH).id
    with pytest.raises(InvalidPriority, match=f"0 to {TOP}"):  # the queue's x-max-priority
        work.apply_async(kwargs={"n": 0}, priority=TOP + 1)
    prio["start_worker"]()
    every = [rescued, *low, *high, retried]
    wait_for(
        lambda: all(j.status.value == "completed" for j in map(tracker.get_job, every)),
        timeout=180,
        interval=0.5,
        what="every job completed",
    )
    client = redis.Redis.from_url(prio["config"]["redis_url"])
    starts = [raw.decode().split() for raw in client.lrange("prio:starts", 0, -1)]
    client.close()
    order = [job_id for job_id, run, _ in starts if run == "1"]
    first = set(order[:22])
    assert set(high) <= first and rescued in first and retried in first, order[:25]
    seen = {(job_id, int(run)): priority for job_id, run, priority in starts}
    assert seen[retried, 1] == seen[retried, 2] == str(HIGH)  # the retry kept it
    assert seen[rescued, 1] == str(RESCUED)  # the reaper's publish kept it
    assert {seen[j, 1] for j in high} == {str(HIGH)} and {seen[j, 1] for j in low} == {str(LOW)}
    assert [j.id for j in tracker.jobs(priority=RESCUED).jobs] == [rescued]


def test_a_priority_beyond_the_queues_x_max_priority_writes_nothing(prio: dict[str, Any]) -> None:
    app, tracker = prio["app"], prio["tracker"]
    client = redis.Redis.from_url(prio["config"]["redis_url"])
    keys = set(client.keys("*"))
    work = app.tasks["prio.work"]
    for priority in (TOP + 1, 255):  # above the queue's x-max-priority, within AMQP's 0-255
        with pytest.raises(InvalidPriority, match=f"0 to {TOP}"):
            work.apply_async(kwargs={"n": 0}, priority=priority)
        with pytest.raises(InvalidPriority, match=f"0 to {TOP}"):
            work.with_options(options={"priority": priority})(n=0)
    assert list(tracker.jobs().jobs) == []  # no row
    with app.connection_for_write() as conn:  # no message
        declared = app.conf.task_queues[0].bind(conn.default_channel).queue_declare(passive=True)
    assert declared.message_count == 0
    assert set(client.keys("*")) == keys  # no guard key
    client.close()
