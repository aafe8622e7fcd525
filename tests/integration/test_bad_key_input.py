"""Issue 22, item 11: a lone surrogate (text from bytes that are not UTF-8) in an argument
a key is built from, or in a per-call key, is ``InvalidPayload`` before Redis or the
database is asked (it was a bare ``UnicodeEncodeError`` from redis-py); nothing left
behind. A real Redis guard and a SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from celery import Celery

from celery_tracked import InvalidPayload, Tracker, tracked_task
from celery_tracked.migrate import upgrade


def test_a_lone_surrogate_in_a_key_is_invalid_payload(redis_url: str, tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'tracked.sqlite3'}"
    upgrade(database_url)
    app = Celery("surrogate", broker="memory://", set_as_current=False)
    app.conf.update(
        tracked_database_url=database_url, tracked_redis_url=redis_url, tracked_key_prefix="sg"
    )

    @tracked_task(app=app, name="surrogate.keyed", idempotency_key="user:{name}")
    def keyed(name: str) -> str:
        return name

    tracker = Tracker.for_app(app)
    client = redis.Redis.from_url(redis_url)
    try:
        with pytest.raises(InvalidPayload, match="lone surrogate") as caught:
            keyed.enqueue(name="b\udcffd")
        assert "\udcff" not in str(caught.value)
        with pytest.raises(InvalidPayload, match="lone surrogate"):
            keyed.apply_async(kwargs={"name": "ok"}, idempotency_key="x\udcff")
        assert list(tracker.jobs()) == []
        assert client.keys("sg:*") == []
        assert keyed.enqueue(name="ok").created  # the guard and the store work on
    finally:
        client.close()
        tracker.close()
        Tracker.forget(app)
        app.close()
