"""A duplicate caller never gets a job that then vanishes; the relay publishes the rows
whose producer died between insert and publish (issue 6, item 4). PostgreSQL and SQLite,
real Redis as broker and guard; the Celery publish is made to fail or to "die"."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from celery import Celery
from celery.app.task import Task

from celery_tracked import EnqueueError, JobStatus, TrackedTask, tracked_task
from celery_tracked.adapter.beat import RELAY_TASK
from celery_tracked.core.jobs import Job, utcnow

from .conftest import AppFactory, queue_messages, tracker_of

#: The relay (and these tests) finalize the app, and Celery then announces to it every
#: ``app.task`` of the whole test session (``shared=True`` is Celery's default): the other
#: test modules' same-named local tasks would warn.
pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")

QUEUE = "relay_q"
LATER = timedelta(hours=1)


class ProducerDied(BaseException):
    """Raised by a publish to stand for a producer killed after its insert (no undo runs)."""


@pytest.fixture
def publish_hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[], None]]]:
    """Hooks run (in order, once each) before Celery's own publish of a tracked enqueue."""
    hooks: list[Callable[[], None]] = []
    original = Task.apply_async

    def apply_async(self: Task[Any, Any], *args: Any, **kwargs: Any) -> Any:
        if hooks:
            hooks.pop(0)()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Task, "apply_async", apply_async)
    yield hooks


def make_task(app: Celery) -> TrackedTask:
    # a name per test: Celery announces every app.task to every app it finalizes later
    name = f"relay_test.work.{uuid.uuid4().hex}"

    @tracked_task(app=app, name=name, queue=QUEUE, idempotency_key="k:{n}")
    def work(n: int, password: str | None = None) -> None: ...

    return work


def die() -> None:
    raise ProducerDied()


def died_enqueue(task: TrackedTask, hooks: list[Callable[[], None]], **kwargs: Any) -> Job:
    """An enqueue whose producer dies between its insert and its publish."""
    hooks.append(die)
    with pytest.raises(ProducerDied):
        task.enqueue(**kwargs)
    key = f"k:{kwargs['n']}"
    job = tracker_of(task.app)._services.store.find_by_key(task.tracked_job_type, key)
    assert job is not None and job.status is JobStatus.PENDING and job.published_at is None
    return job


def message_ids(broker: redis.Redis) -> list[str]:
    return [json.loads(m)["headers"]["id"] for m in queue_messages(broker, QUEUE)]


def test_a_duplicate_waits_for_a_failing_first_producer_and_gets_a_job_that_exists(
    make_app: AppFactory, broker: redis.Redis, publish_hook: list[Callable[[], None]]
) -> None:
    app = make_app()
    work = make_task(app)
    tracker = tracker_of(app)
    b_waiting = threading.Event()
    first: dict[str, Any] = {}

    def fail_after_b_arrived() -> None:
        b_waiting.wait(10)
        threading.Event().wait(0.3)  # B is polling A's unpublished row
        raise ConnectionError("broker went away")

    def producer_a() -> None:
        try:
            work.enqueue(n=1)
        except EnqueueError as exc:
            first["error"] = exc

    publish_hook.append(fail_after_b_arrived)
    a = threading.Thread(target=producer_a)
    a.start()
    assert_soon(
        lambda: tracker._services.store.find_by_key(work.tracked_job_type, "k:1") is not None
    )
    b_waiting.set()
    second = work.enqueue(n=1)
    a.join(10)
    assert isinstance(first.get("error"), EnqueueError)
    job = tracker.get_job(second.job_id)
    assert job is not None and job.status is JobStatus.PENDING and job.published_at is not None
    assert second.created, "B created (and published) its own job once A undid its row"
    assert message_ids(broker) == [second.job_id]


def test_a_row_whose_producer_died_is_relayed_once_and_unblocks_its_key(
    make_app: AppFactory, broker: redis.Redis, publish_hook: list[Callable[[], None]]
) -> None:
    app = make_app()
    work = make_task(app)
    tracker = tracker_of(app)
    tracker._services.enqueuer.duplicate_wait_s = 0.2
    dead = died_enqueue(work, publish_hook, n=7)
    with pytest.raises(EnqueueError, match="not handed to the broker"):
        work.enqueue(n=7)  # never handed a job that may never run
    assert tracker.relay().published == [], "within the grace period"
    report = tracker.relay(now=utcnow() + LATER)
    assert report.published == [dead.id]
    assert message_ids(broker) == [dead.id]
    message = json.loads(queue_messages(broker, QUEUE)[0])
    assert message["headers"]["tracked_job_id"] == dead.id
    relayed = tracker.get_job(dead.id)
    assert relayed is not None and relayed.published_at is not None
    assert relayed.locked_by is None and relayed.status is JobStatus.PENDING
    assert [e.event for e in tracker.history(dead.id)] == ["enqueued", "relayed"]
    assert tracker.relay(now=utcnow() + LATER).published == []
    again = work.enqueue(n=7)
    assert (again.job_id, again.created) == (dead.id, False)
    assert message_ids(broker) == [dead.id]


def test_many_relays_at_once_publish_each_row_once(
    make_app: AppFactory, publish_hook: list[Callable[[], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    work = make_task(app)
    tracker = tracker_of(app)
    dead = {died_enqueue(work, publish_hook, n=n).id for n in range(12)}
    sent: list[str] = []
    lock = threading.Lock()

    def publish(job: Job) -> None:
        with lock:
            sent.append(job.id)

    start = threading.Barrier(4)
    monkeypatch.setattr(tracker._services.maintenance["relay"], "publish", publish)

    def one_relay() -> None:
        start.wait()
        tracker.relay(now=utcnow() + LATER)

    relays = [threading.Thread(target=one_relay) for _ in range(4)]
    for thread in relays:
        thread.start()
    for thread in relays:
        thread.join(30)
    assert sorted(sent) == sorted(dead)


def test_a_failed_enqueue_is_never_relayed(
    make_app: AppFactory, broker: redis.Redis, publish_hook: list[Callable[[], None]]
) -> None:
    app = make_app()
    work = make_task(app)
    tracker = tracker_of(app)

    def broker_down() -> None:
        raise ConnectionError("broker down")

    publish_hook.append(broker_down)
    with pytest.raises(EnqueueError):
        work.enqueue(n=3)
    assert tracker.relay(now=utcnow() + LATER).published == []
    assert queue_messages(broker, QUEUE) == []


def test_a_producer_whose_row_a_relay_published_returns_the_job(
    make_app: AppFactory, broker: redis.Redis, publish_hook: list[Callable[[], None]]
) -> None:
    """A producer slower than the grace period: the relay published its row, then its own
    publish failed. Its undo must not delete a job that is running: it returns it."""
    app = make_app()
    work = make_task(app)
    tracker = tracker_of(app)
    relayed: list[str] = []

    def relay_then_fail() -> None:
        relayed.extend(tracker.relay(now=utcnow() + LATER).published)
        raise ConnectionError("broker went away")

    publish_hook.append(relay_then_fail)
    result = work.enqueue(n=4)
    assert relayed == [result.job_id] and result.created
    assert tracker.get_job(result.job_id) is not None
    assert message_ids(broker) == [result.job_id]


def test_a_redacted_row_is_cancelled_not_run_with_the_marker(
    make_app: AppFactory, broker: redis.Redis, publish_hook: list[Callable[[], None]]
) -> None:
    app = make_app()
    work = make_task(app)
    tracker = tracker_of(app)
    dead = died_enqueue(work, publish_hook, n=5, password="hunter22")
    report = tracker.relay(now=utcnow() + LATER)
    assert report.cancelled == [dead.id] and report.published == []
    job = tracker.get_job(dead.id)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert "redacted" in (job.error_message or "")
    assert queue_messages(broker, QUEUE) == []


def test_the_relay_command_runs_one_pass(
    make_app: AppFactory,
    broker: redis.Redis,
    publish_hook: list[Callable[[], None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``celery tracked relay``: the pass its Beat task runs, by hand (a table, ``--json``)."""
    from celery.bin.base import CLIContext
    from click.testing import CliRunner

    from celery_tracked.cli import tracked

    app = make_app()
    work = make_task(app)
    dead = died_enqueue(work, publish_hook, n=6)
    relay = tracker_of(app)._services.maintenance["relay"]
    monkeypatch.setattr(relay, "grace_s", -LATER.total_seconds())  # as now=utcnow() + LATER
    context = CLIContext(app=app, no_color=True, workdir=None)

    def cli(*args: str) -> str:
        result = CliRunner().invoke(tracked, ["relay", *args], obj=context, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    table = cli()
    assert "WHAT" in table and "published" in table and dead.id in table
    assert message_ids(broker) == [dead.id]
    assert json.loads(cli("--json")) == {"published": [], "cancelled": [], "failed": [], "left": []}
    assert "nothing to relay" in cli()


# -- the default Beat entry -------------------------------------------------------------


def test_an_app_with_a_tracked_task_gets_the_relay_beat_entry(make_app: AppFactory) -> None:
    app = make_app(tracked_relay_interval_seconds=7)
    make_task(app)
    app.finalize()
    entry = app.conf.beat_schedule[RELAY_TASK]
    assert entry["task"] == RELAY_TASK and entry["schedule"] == 7
    assert RELAY_TASK in app.tasks


def test_the_users_own_entry_and_turning_it_off_are_respected(make_app: AppFactory) -> None:
    mine = {"task": RELAY_TASK, "schedule": 600.0}
    app = make_app(beat_schedule={RELAY_TASK: mine})
    make_task(app)
    app.finalize()
    assert app.conf.beat_schedule[RELAY_TASK] == mine
    off = make_app(tracked_relay_interval_seconds=0)
    make_task(off)
    off.finalize()
    assert RELAY_TASK not in off.conf.beat_schedule


def assert_soon(condition: Callable[[], object], timeout: float = 10.0) -> None:
    from tests.conftest import wait_for

    wait_for(condition, timeout=timeout)
