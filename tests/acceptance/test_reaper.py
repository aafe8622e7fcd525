"""The stalled-job reaper with real workers, a real Redis broker and PostgreSQL (issue 13,
item 2): a whole worker SIGKILLed mid-job with the Redis transport's default
``visibility_timeout`` (an hour), a broker Redis restarted without persistence while keyed
jobs were queued, and two reapers at once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import Env, Worker
from tracked_app import QUEUE, create_app

from celery_tracked import JobStatus, Tracker
from celery_tracked.adapter.beat import REAP_TASK
from celery_tracked.core.fences import AttemptError, Lease
from celery_tracked.core.jobs import Claim, utcnow
from celery_tracked.services.reaper import ReapReport
from tests.conftest import wait_for

#: Short thresholds: the defaults (minutes) are for production.
SHORT = {
    "tracked_reaper_processing_seconds": 0.5,
    "tracked_reaper_pending_seconds": 1.0,
    "tracked_reaper_retrying_seconds": 1.0,
    # a message found nowhere is rescued once a pass 1 s later confirms it
    "tracked_reaper_interval_seconds": 2,
}
SHORT_ENV = {
    f"CELERY_TRACKED_{k.removeprefix('tracked_').upper()}": str(v) for k, v in SHORT.items()
}


def reaper_of(config: dict[str, Any], **conf: Any) -> Tracker:
    """A tracker of its own (an app like the test's, the short thresholds), as the process
    a Beat-run reaper would be."""
    app = create_app(config)
    app.conf.update({**SHORT, **conf})
    return Tracker.for_app(app)


@pytest.fixture
def reapers(env: Env) -> Iterator[Callable[..., Tracker]]:
    made: list[Tracker] = []

    def make(config: dict[str, Any] | None = None, **conf: Any) -> Tracker:
        tracker = reaper_of(config or env.config, **conf)
        made.append(tracker)
        return tracker

    yield make
    for tracker in made:
        tracker.close()
        tracker.app.close()


def reap_until(tracker: Tracker, done: Callable[[ReapReport], bool], timeout: float) -> ReapReport:
    """Run reaper passes until the reports gathered so far satisfy ``done``."""
    total = ReapReport()

    def one_pass() -> bool:
        report = tracker.reap()
        for name in ("rescued", "abandoned", "unpublished"):
            getattr(total, name).extend(getattr(report, name))
        total.left = report.left
        return done(total)

    wait_for(one_pass, timeout=timeout, interval=0.2, what=f"the reaper: {total.as_dict()}")
    return total


def let_pass(env: Env, seconds: float) -> None:
    """Wait until ``seconds`` passed on the database's clock (the one leases are judged on)."""
    store = env.tracker._services.store
    until = store.clock() + timedelta(seconds=seconds)
    wait_for(lambda: store.clock() >= until, timeout=seconds + 10, interval=0.1)


def kill_whole_worker(worker: Worker) -> None:
    """SIGKILL the worker's main process and its pool children (its process group)."""
    os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait(timeout=10)


def restore_unacked(env: Env) -> int:
    """Give the messages a dead worker held back to their queue, as the Redis transport
    does once they are older than ``visibility_timeout``: kombu's own restore."""
    tags = [tag.decode() for tag in env.redis.hkeys("unacked")]
    with env.app.connection_for_write() as conn:
        qos = conn.default_channel.qos
        for tag in tags:
            qos.restore_by_tag(tag)
    return len(tags)


def events_of(env: Env, job_id: str) -> list[str]:
    return [e.event for e in env.tracker.history(job_id)]


def rescues(env: Env, job_id: str) -> int:
    return sum(1 for e in env.tracker.history(job_id) if e.event == "rescued")


# -- a whole worker SIGKILLed, never restarted ------------------------------------------------


def test_a_whole_worker_killed_mid_job_is_rescued_and_its_late_messages_run_nothing(
    env: Env, start_worker: Callable[..., Worker], reapers: Callable[..., Tracker]
) -> None:
    reaper = reapers()
    first = start_worker("w1", concurrency=2)  # prefetches 2 x 4 messages
    hold = env.task("acc.hold")
    running = hold.enqueue(x="a").job_id  # 3 attempts
    last = hold.with_options(max_attempts=1)(x="b").job_id  # its only attempt
    for job_id in (running, last):
        wait_for(lambda job_id=job_id: env.redis.get(f"holding:{job_id}"), what="holding")
    prefetched = [env.task("acc.succeed").enqueue(x=i).job_id for i in range(3)]
    wait_for(
        lambda: len(env.unacked()) == 5 and not env.broker_messages(),
        what="the worker to hold 2 running and 3 prefetched messages",
    )
    let_pass(env, 1.2)  # older than the pending threshold: only the live worker protects them

    report = reaper.reap()  # the worker lives: its leases are renewed, it holds the rest
    assert report.rescued == [] and report.abandoned == []
    assert sorted(report.left) == sorted(prefetched)

    kill_whole_worker(first)
    report = reap_until(
        reaper,
        lambda r: len(r.rescued) == 4 and len(r.abandoned) == 1,
        timeout=30,  # the lease (5 s) must lapse, plus the grace
    )
    assert sorted(report.rescued) == sorted([running, *prefetched])
    assert report.abandoned == [last]
    lost = env.tracker.get_job(last)
    assert lost is not None and (lost.status, lost.error_type) == (JobStatus.FAILED, "abandoned")

    second = start_worker("w2", concurrency=2)
    for job_id in (running, *prefetched):
        env.wait_status(job_id, "completed", timeout=30)
    runs = {job_id: env.ran(job_id) for job_id in (running, last, *prefetched)}
    # the killed attempts ran once in w1; each job completed once, in w2
    assert runs == {running: 2, last: 1, **dict.fromkeys(prefetched, 1)}
    assert all(rescues(env, job_id) == 1 for job_id in (running, *prefetched))

    # an hour later the Redis transport would hand w1's messages back: they run nothing
    assert restore_unacked(env) == 5
    late = {running, last, *prefetched}
    wait_for(
        lambda: all(second.records_of(job_id, "skipped") for job_id in late),
        timeout=30,
        what="w2 to skip each late message",
    )
    wait_for(env.broker_empty, what="every late message acknowledged")
    assert {job_id: env.ran(job_id) for job_id in runs} == runs
    assert env.status(last) == "failed"
    assert all(env.status(job_id) == "completed" for job_id in (running, *prefetched))


def test_a_killed_run_with_redacted_arguments_waits_for_its_message_in_the_queue(
    env: Env, start_worker: Callable[..., Worker], reapers: Callable[..., Tracker]
) -> None:
    """A run whose arguments were stored redacted cannot be re-sent from its row. Its
    original message, back in the queue (RabbitMQ gives a dead consumer's messages back at
    once; Redis after ``visibility_timeout``, done here by hand), is the only one carrying
    the arguments: the reaper leaves the run to it (was: abandoned, and the message then
    skipped), and the next worker takes it over and completes it."""
    reaper = reapers()
    first = start_worker("w1", concurrency=1)
    job_id = env.task("acc.hold").enqueue(x={"password": "s3cret"}).job_id
    wait_for(lambda: env.redis.get(f"holding:{job_id}"), what="holding")
    kill_whole_worker(first)
    assert restore_unacked(env) == 1 and len(env.broker_messages()) == 1
    let_pass(env, 8.0)  # the 5 s lease, its grace and the 0.5 s patience have passed

    report = reaper.reap()
    assert report.left == [job_id] and report.abandoned == [] and report.rescued == []
    assert env.status(job_id) == "processing"
    start_worker("w2", concurrency=1)
    env.wait_status(job_id, "completed")
    assert env.ran(job_id) == 2  # the killed attempt, then the takeover: once each
    assert [e.event for e in env.tracker.history(job_id)].count("rescued") == 0


# -- what the reaper never touches --------------------------------------------------------


def test_live_work_a_countdown_and_a_backlog_are_never_reaped(
    env: Env, start_worker: Callable[..., Worker], reapers: Callable[..., Tracker]
) -> None:
    """A long body (its lease renewed), a job a live worker holds for its countdown, and
    jobs waiting in a queue nobody consumes yet all look old; none of them is stalled."""
    reaper = reapers()
    start_worker("w1", concurrency=2)
    long_body = env.task("acc.hold").enqueue(x="long").job_id
    wait_for(lambda: env.redis.get(f"holding:{long_body}"), what="the long body to run")
    later = env.task("acc.succeed").with_options(options={"countdown": 300})(x="later").job_id
    wait_for(lambda: len(env.unacked()) == 2, what="the worker to hold the countdown job")
    backlog_task = env.task("acc.succeed").with_options(options={"queue": "acc_backlog"})
    backlog = [backlog_task(x=i).job_id for i in range(3)]
    let_pass(env, 7.0)  # past every threshold, even the long body's 5 s lease and grace

    report = reaper.reap()
    assert report.rescued == [] and report.abandoned == []
    # the countdown job is not even looked at: its row says it is not due (issue 22, item 8)
    assert sorted(report.left) == sorted(backlog)
    assert env.status(long_body) == "processing" and env.ran(long_body) == 1
    env.redis.set(f"go:{long_body}", 1)
    env.wait_status(long_body, "completed")
    assert env.ran(long_body) == 1 and rescues(env, long_body) == 0
    assert all(env.status(job_id) == "pending" for job_id in (later, *backlog))


# -- the broker's Redis restarted without persistence -----------------------------------------


def _free_port() -> int:
    for port in range(6430, 6440):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError("no free port in 6430-6439 for a private Redis")


class PrivateRedis:
    """A ``redis-server`` of this test's own (no persistence), restartable."""

    def __init__(self, workdir: Path) -> None:
        self.port = _free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        try:
            wait_for(lambda: _pings(client), timeout=10, what="the private Redis")
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # nothing saved: whatever it held is gone
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_broker_restarted_without_persistence_loses_nothing_for_good(
    env: Env,
    start_worker: Callable[..., Worker],
    private_redis: PrivateRedis,
    reapers: Callable[..., Tracker],
) -> None:
    config = {**env.config, "broker": private_redis.url}  # guard and records stay on env's
    producer = reapers(config)
    keyed = producer.app.tasks["acc.keyed"]
    jobs = {f"r{i}": keyed.enqueue(x=f"r{i}").job_id for i in range(4)}
    broker = redis.Redis.from_url(private_redis.url)
    try:
        assert broker.llen(QUEUE) == 4
        private_redis.restart()
        assert broker.llen(QUEUE) == 0  # the queued messages are gone
    finally:
        broker.close()
    worker = start_worker("w1", environ={"TRACKED_TEST_BROKER": private_redis.url, **SHORT_ENV})
    for key, job_id in jobs.items():  # the keys are blocked: each returns the stuck job
        again = keyed.enqueue(x=key)
        assert (again.job_id, again.created, again.status) == (job_id, False, JobStatus.PENDING)

    producer.app.send_task(REAP_TASK, queue=QUEUE)  # the reaper task, run by the worker
    for job_id in jobs.values():  # a first pass finds them nowhere...
        wait_for(lambda job_id=job_id: events_of(env, job_id)[-1:] == ["missing"], what="missing")
    let_pass(env, 1.1)
    producer.app.send_task(REAP_TASK, queue=QUEUE)  # ...the next one confirms it
    for job_id in jobs.values():
        env.wait_status(job_id, "completed", timeout=30)
    assert {job_id: env.ran(job_id) for job_id in jobs.values()} == dict.fromkeys(jobs.values(), 1)
    assert all(rescues(env, job_id) == 1 for job_id in jobs.values())
    for key, job_id in jobs.items():  # the keys answer at once with the finished job
        again = keyed.enqueue(x=key)
        assert (again.job_id, again.created, again.status) == (job_id, False, JobStatus.COMPLETED)
    assert producer.reap().as_dict() == {
        "rescued": [],
        "abandoned": [],
        "left": [],
        "unpublished": [],
        "cancelled": [],
    }
    assert "celery_tracked.reap" in worker.log()


# -- two reapers at once ----------------------------------------------------------------------


def test_two_reapers_at_once_rescue_each_job_exactly_once(
    env: Env, start_worker: Callable[..., Worker], reapers: Callable[..., Tracker]
) -> None:
    succeed = env.task("acc.succeed")
    lost = [succeed.enqueue(x=i).job_id for i in range(12)]
    env.redis.delete(QUEUE)  # their messages are lost
    store, who = env.tracker._services.store, {"worker": "w0@gone", "now": utcnow()}
    runs = [succeed.enqueue(x=f"run{i}").job_id for i in range(3)]
    env.redis.delete(QUEUE)
    for job_id in runs:  # a run whose worker died: a lease nobody renews, no message
        assert store.claim(job_id, Lease(owner="gone:host:0:1", lease_s=0.0, **who)) is not None
    retry = runs.pop()
    assert store.retrying(
        Claim(retry, 1, 3),
        AttemptError(error_type="E", error_message="m", duration_ms=None, now=utcnow()),
        delay_ms=0,
    )  # a retry whose message the broker lost
    stalled = [*lost, *runs, retry]
    let_pass(env, 2.0)  # past the thresholds (runs: a 5 s lease's grace, 1.25 s, + 0.5 s)

    first, second = reapers(), reapers()
    barrier = threading.Barrier(2)
    reports: list[ReapReport] = []

    def run(tracker: Tracker) -> None:
        barrier.wait()
        reports.append(tracker.reap())

    def both() -> tuple[set[str], set[str]]:
        reports.clear()
        threads = [threading.Thread(target=run, args=(t,)) for t in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(reports) == 2
        mine, theirs = (set(r.rescued) for r in reports)
        assert not mine & theirs, "a job was rescued by both reapers"
        return mine, theirs

    mine, theirs = both()  # the runs; the waiting jobs' messages found nowhere: missing
    assert not (mine | theirs) & set([*lost, retry])
    let_pass(env, 1.1)
    again = both()  # the next pass confirms it
    assert not (mine | theirs) & (again[0] | again[1])
    mine, theirs = mine | again[0], theirs | again[1]
    assert mine | theirs == set(stalled)
    assert all(rescues(env, job_id) == 1 for job_id in stalled)

    start_worker("w1", concurrency=2)
    for job_id in stalled:
        env.wait_status(job_id, "completed", timeout=30)
    assert {job_id: env.ran(job_id) for job_id in stalled} == dict.fromkeys(stalled, 1)
