"""The relay judges a row's age on the database's clock, not on its own host's (issue 22,
item 3): a relay host 30 s ahead (grace 5 s) neither cancels a live secret-bearing job nor
publishes a fresh one a second time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import redis

from celery_tracked.core.jobs import utcnow
from celery_tracked.services import relay as relay_module

from .conftest import AppFactory, tracker_of
from .test_relay import died_enqueue, make_task, message_ids, publish_hook

__all__ = ["publish_hook"]  # the fixture, used here

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")
AHEAD = timedelta(seconds=30)


def test_a_relay_host_ahead_of_the_database_leaves_fresh_rows_alone(
    make_app: AppFactory,
    broker: redis.Redis,
    publish_hook: list[Callable[[], None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = make_app(tracked_relay_grace_seconds=5)
    work = make_task(app)
    tracker = tracker_of(app)
    secret = died_enqueue(work, publish_hook, n=1, password="hunter22")
    plain = died_enqueue(work, publish_hook, n=2)

    def ahead() -> datetime:  # this host's clock, 30 s ahead of the database's
        return utcnow() + AHEAD

    monkeypatch.setattr(relay_module, "utcnow", ahead)
    report = tracker.relay()
    assert (report.published, report.cancelled) == ([], [])
    assert message_ids(broker) == []
    for job_id in (secret.id, plain.id):
        job = tracker.get_job(job_id)
        assert job is not None and job.status.value == "pending" and job.published_at is None
    # ``now=`` still stands for another time to judge by (the tests' fast-forward)
    later = tracker.relay(now=utcnow() + timedelta(hours=1))
    assert (later.published, later.cancelled) == ([plain.id], [secret.id])
