"""Acceptance: sealed arguments (issue 22, item 2). A job whose arguments hold a value
under a redacted name, its message lost (a publish after the commit that met a closed
broker port, a broker that lost its queue, a failed run): with ``tracked_secret_key``, the
relay, the reaper, ``Tracker.retry`` and the CLI's bulk retry send it again with the
right value, and no secret appears in a row, an event, a log or the CLI's output; a key
rotated away or a wrong one ends it with a clear reason, never sends the marker. Without
a key, ``enqueue_in`` of such a call is refused at once. Real PostgreSQL, Redis and
``celery worker``."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from conftest import Env, Worker
from cryptography.fernet import Fernet
from sealed_tasks import digest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from tracked_app import QUEUE, create_app

from celery_tracked import NotTransactional, RetryRefused, Tracker
from celery_tracked.core.jobs import utcnow
from tests.conftest import wait_for

KEY1, KEY2, KEY3 = (Fernet.generate_key().decode() for _ in range(3))
FAST_RELAY = {
    "CELERY_TRACKED_RELAY_GRACE_SECONDS": "1",
    "CELERY_TRACKED_RELAY_INTERVAL_SECONDS": "1",
}
#: Past the relay's grace period (the documented ``now=``).
LATER = timedelta(seconds=600)
SHORT_REAPER = {
    "tracked_reaper_processing_seconds": 0.5,
    "tracked_reaper_pending_seconds": 1.0,
    "tracked_reaper_retrying_seconds": 1.0,
}


def closed_port() -> int:
    """A local port nothing listens on (a broker cut: connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def trackers(env: Env) -> Iterator[Callable[..., Tracker]]:
    """Trackers of apps like the test's, each with its own key(s) and maybe broker."""
    made: list[Tracker] = []

    def make(key: Any, broker: str | None = None, **conf: Any) -> Tracker:
        app = create_app({**env.config, "broker": broker or env.config["broker"]})
        app.conf.update(tracked_secret_key=key, **conf)
        tracker = Tracker.for_app(app)
        made.append(tracker)
        return tracker

    yield make
    for tracker in made:
        tracker.close()
        tracker.app.close()


def with_key(key: str) -> dict[str, str]:
    return {"CELERY_TRACKED_SECRET_KEY": key}


def secret() -> str:
    return f"pw-{uuid.uuid4().hex}"


def committed_unpublished(cut: Tracker, env: Env, password: str) -> str:
    """``enqueue_in`` in a committed transaction whose publish met a closed port."""
    engine = create_engine(env.database_url)
    try:
        with Session(engine) as session:
            created = cut.app.tasks["acc.sealed"].enqueue_in(session, user="ann", password=password)
            session.commit()  # the publish after it fails: the row stays unpublished
    finally:
        engine.dispose()
    assert created.created
    job = cut.get_job(created.job_id)
    assert job is not None and job.status.value == "pending" and job.published_at is None
    return created.job_id


def no_secret_anywhere(env: Env, job_ids: list[str], password: str, *texts: str) -> None:
    rows = env.sql("SELECT * FROM background_jobs WHERE id = ANY(:ids)", ids=job_ids)
    rows += env.sql("SELECT * FROM background_job_events WHERE job_id = ANY(:ids)", ids=job_ids)
    assert rows and password not in repr(rows)
    for text in texts:
        assert password not in text


def got(env: Env, job_id: str) -> list[str]:
    return [v.decode() for v in env.redis.lrange(f"got:{job_id}", 0, -1)]


def test_a_committed_enqueue_whose_publish_failed_is_relayed_with_its_secret(
    env: Env,
    trackers: Callable[..., Tracker],
    start_worker: Callable[..., Worker],
    start_beat: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Was: ``created=True``, then the relay cancelled it ("arguments were redacted"). The
    relay here is the deployed one: Beat's entry, run by a worker holding the key."""
    caplog.set_level(logging.DEBUG)
    password = secret()
    cut = trackers(KEY1, broker=f"redis://127.0.0.1:{closed_port()}/0")
    job_id = committed_unpublished(cut, env, password)
    sealed = env.sql("SELECT secrets_sealed FROM background_jobs WHERE id = :id", id=job_id)
    assert sealed[0][0] and password not in sealed[0][0]
    assert env.broker_messages() == []

    worker = start_worker("w1", concurrency=1, environ={**FAST_RELAY, **with_key(KEY1)})
    beat_log = start_beat(FAST_RELAY)
    env.wait_status(job_id, "completed", timeout=60)
    assert "relayed" in [e.event for e in env.tracker.history(job_id)]
    assert got(env, job_id) == [digest(password)]
    no_secret_anywhere(
        env, [job_id], password, caplog.text, worker.log(), beat_log.read_text(errors="replace")
    )


def test_enqueue_in_without_a_key_refuses_a_call_with_a_redacted_argument(env: Env) -> None:
    """Was: accepted, and its job silently cancelled by the relay if the publish failed."""
    engine = create_engine(env.database_url)
    try:
        with Session(engine) as session:
            with pytest.raises(NotTransactional, match="tracked_secret_key"):
                env.task("acc.sealed").enqueue_in(session, user="bob", password=secret())
            session.commit()
    finally:
        engine.dispose()
    assert env.sql("SELECT id FROM background_jobs WHERE task_name = 'acc.sealed'") == []


def test_the_reaper_rescues_a_redacted_job_whose_message_was_lost(
    env: Env, trackers: Callable[..., Tracker], start_worker: Callable[..., Worker]
) -> None:
    """Was: abandoned (``failed``) without running."""
    password = secret()
    producer = trackers(KEY1, **SHORT_REAPER)
    job_id = producer.app.tasks["acc.sealed"].enqueue(user="cy", password=password).job_id
    assert len(env.broker_messages()) == 1
    env.redis.delete(QUEUE)  # the broker lost it (a Redis restarted without persistence)
    store = env.tracker._services.store
    until = store.clock() + timedelta(seconds=2)
    wait_for(lambda: store.clock() >= until, timeout=15, interval=0.1)

    assert producer.reap().left == [job_id]  # the first sighting: its message is missing
    report = producer.reap(now=store.clock() + LATER)  # confirmed by a second pass
    assert report.rescued == [job_id] and report.abandoned == []
    start_worker("w1", concurrency=1)
    env.wait_status(job_id, "completed")
    assert got(env, job_id) == [digest(password)]


def test_retry_and_bulk_retry_of_failed_redacted_jobs_need_no_values_again(
    env: Env,
    trackers: Callable[..., Tracker],
    start_worker: Callable[..., Worker],
    run_cli: Callable[..., Any],
) -> None:
    """Was: ``RetryRefused`` ("pass them again"), and the CLI refused them."""
    tracker = trackers(KEY1)
    task = tracker.app.tasks["acc.sealed"]
    passwords = {user: secret() for user in ("dee", "eve", "fay")}
    env.redis.set("fail:dee", 1), env.redis.set("fail:eve", 1), env.redis.set("fail:fay", 1)
    ids = {user: task.enqueue(user=user, password=pw).job_id for user, pw in passwords.items()}
    start_worker("w1", concurrency=2)
    for job_id in ids.values():
        env.wait_status(job_id, "failed")
    env.redis.delete("fail:dee", "fail:eve", "fail:fay")

    assert tracker.retry(ids["dee"]) is True
    env.wait_status(ids["dee"], "completed")
    cli = run_cli(
        "retry", "--status", "failed", "--task", "acc.sealed",
        environ={"CELERY_TRACKED_SECRET_KEY": KEY1},
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr
    for user in ("eve", "fay"):
        env.wait_status(ids[user], "completed")
    for user, job_id in ids.items():
        assert got(env, job_id) == [digest(passwords[user])] * 2
    shown = run_cli("show", ids["eve"], environ={"CELERY_TRACKED_SECRET_KEY": KEY1})
    no_secret_anywhere(
        env, list(ids.values()), passwords["eve"], cli.stdout, cli.stderr, shown.stdout
    )


def test_a_rotated_key_reads_old_rows_and_a_wrong_key_never_sends_the_marker(
    env: Env,
    trackers: Callable[..., Tracker],
    start_worker: Callable[..., Worker],
    run_cli: Callable[..., Any],
) -> None:
    cut = trackers(KEY1, broker=f"redis://127.0.0.1:{closed_port()}/0")
    first, second = secret(), secret()
    a = committed_unpublished(cut, env, first)
    b = committed_unpublished(cut, env, second)

    wrong = trackers(KEY3)  # another app's key: no message, a clear reason
    report = wrong.relay(now=utcnow() + LATER)
    assert sorted(report.cancelled) == sorted([a, b]) and report.published == []
    assert env.broker_messages() == []
    for job_id in (a, b):
        job = env.wait_status(job_id, "cancelled")
        assert "none of the keys of tracked_secret_key decrypts" in (job.error_message or "")
    with pytest.raises(RetryRefused, match="decrypts"):
        wrong.retry(a)

    rotated = trackers([KEY2, KEY1])  # the new key first: it encrypts, both decrypt
    assert rotated.retry(a) is True
    resealed = env.sql("SELECT secrets_sealed FROM background_jobs WHERE id = :id", id=a)[0][0]
    Fernet(KEY2.encode()).decrypt(resealed.encode())  # sealed again with the newest key
    cli = run_cli(
        "retry", b, environ={"CELERY_TRACKED_SECRET_KEY": f"{KEY2}, {KEY1}"}
    )  # the comma-separated form of the environment
    assert cli.returncode == 0, cli.stdout + cli.stderr
    start_worker("w1", concurrency=1)
    env.wait_status(a, "completed")
    env.wait_status(b, "completed")
    assert got(env, a) == [digest(first)] and got(env, b) == [digest(second)]
    no_secret_anywhere(env, [a, b], first, cli.stdout, cli.stderr)
    no_secret_anywhere(env, [a, b], second)


def test_a_process_without_a_key_leaves_sealed_jobs_to_one_that_has_it(
    env: Env,
    trackers: Callable[..., Tracker],
    start_worker: Callable[..., Worker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Was: an ops host's ``tracked reap`` (or a relay in a Beat process) with no
    ``tracked_secret_key`` cancelled/abandoned sealed jobs a keyed worker could send
    (trial of issue 22, F3)."""
    cut = trackers(KEY1, broker=f"redis://127.0.0.1:{closed_port()}/0")
    unpublished_pw, lost_pw = secret(), secret()
    unpublished = committed_unpublished(cut, env, unpublished_pw)
    producer = trackers(KEY1, **SHORT_REAPER)
    lost = producer.app.tasks["acc.sealed"].enqueue(user="lo", password=lost_pw).job_id
    env.redis.delete(QUEUE)  # the broker lost it
    store = env.tracker._services.store
    until = store.clock() + timedelta(seconds=2)
    wait_for(lambda: store.clock() >= until, timeout=15, interval=0.1)

    keyless = trackers((), **SHORT_REAPER)
    with caplog.at_level(logging.WARNING, logger="celery_tracked"):
        relayed = keyless.relay(now=utcnow() + LATER)
        keyless.reap()  # the first sighting: its message is missing
        reaped = keyless.reap(now=store.clock() + LATER)  # confirmed lost
    assert relayed.left == [unpublished] and relayed.cancelled == relayed.published == []
    assert lost in reaped.left and reaped.abandoned == reaped.rescued == []
    assert unpublished not in reaped.abandoned
    assert env.status(unpublished) == env.status(lost) == "pending"
    said = [r.getMessage() for r in caplog.records if "no tracked_secret_key" in r.getMessage()]
    assert len(said) == 2 and "1 job(s)" in said[0], said

    keyed = trackers(KEY1, **SHORT_REAPER)
    assert keyed.relay(now=utcnow() + LATER).published == [unpublished]
    assert lost in keyed.reap(now=store.clock() + 2 * LATER).rescued
    start_worker("w1", concurrency=1)
    env.wait_status(unpublished, "completed")
    env.wait_status(lost, "completed")
    assert got(env, unpublished) == [digest(unpublished_pw)]
    assert got(env, lost) == [digest(lost_pw)]
