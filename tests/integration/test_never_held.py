"""Jobs due beyond the horizon that are published at once with their countdown instead of
held in the database, because only their own message carries something the row does not
(the issue 26 trial): arguments redacted and not sealed (no ``tracked_secret_key``; held,
the scheduler pass could not rebuild its message and cancelled it, "its producer died
before publishing it"), and Celery's ``expires`` (held, its message was sent from the row
without it, and it ran after it expired). With the key a redacted job is held and sealed,
as documented. PostgreSQL and SQLite, real Redis as broker and guard."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import redis

from celery_tracked import JobStatus, tracked_task

from .conftest import AppFactory, queue_messages, tracker_of
from .test_reaper import get

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


def test_a_far_job_with_unsealed_redacted_arguments_is_published_not_held(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    app = make_app(tracked_schedule_horizon_seconds=60)
    queue = f"held-redacted-{uuid.uuid4().hex[:8]}"

    @tracked_task(app=app, queue=queue, shared=False, name=f"t.{uuid.uuid4().hex}")
    def call_provider(order: str, api_key: str) -> None: ...

    result = call_provider.apply_async(args=("o-1", "SEKRIT"), countdown=3600)
    tracker = tracker_of(app)
    job = get(tracker, result.id)
    assert job.payload == {"args": ["o-1", "[redacted]"], "kwargs": {}}
    assert job.published_at is not None, "held without a message it cannot be rebuilt from"
    assert len(queue_messages(broker, queue)) == 1  # its own message, with Celery's eta
    assert job.due_at is not None and job.due_at - tracker._services.store.clock() > timedelta(
        minutes=59
    )
    tracker.schedule(now=job.due_at - timedelta(seconds=30))  # the pass, as it comes due
    assert get(tracker, result.id).status is JobStatus.PENDING  # not cancelled as unsendable


def test_with_the_secret_key_such_a_job_is_held_and_sealed(make_app: AppFactory) -> None:
    pytest.importorskip("cryptography")
    from cryptography.fernet import Fernet

    app = make_app(tracked_schedule_horizon_seconds=60, tracked_secret_key=Fernet.generate_key())

    @tracked_task(app=app, shared=False, name=f"t.{uuid.uuid4().hex}")
    def call_provider(order: str, api_key: str) -> None: ...

    result = call_provider.apply_async(args=("o-1", "SEKRIT"), countdown=3600)
    job = get(tracker_of(app), result.id)
    assert job.published_at is None  # held: the pass rebuilds it from the sealed values


def test_a_far_job_with_celery_expires_is_published_not_held(
    make_app: AppFactory, broker: redis.Redis
) -> None:
    app = make_app(tracked_schedule_horizon_seconds=60)
    queue = f"held-expires-{uuid.uuid4().hex[:8]}"

    @tracked_task(app=app, queue=queue, shared=False, name=f"t.{uuid.uuid4().hex}")
    def remind(who: str) -> None: ...

    result = remind.apply_async(args=("a",), countdown=3600, expires=1800)
    job = get(tracker_of(app), result.id)
    assert job.published_at is not None, "held: its message would be sent without expires"
    [message] = queue_messages(broker, queue)
    assert b'"expires": "' in message  # Celery revokes it if it comes after that
