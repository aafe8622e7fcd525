"""A debounce replacement whose publish fails, with a real worker and a cut broker path
(issue 12, item 2).

The producer reaches the broker through a proxy (``cut_path.py``) that the test cuts
between the replacement's revision write and its publish; the worker consumes directly.
Whether the replaced message was consumed (skipped as stale) before the undo or after it,
the job must run exactly once, with its previous arguments: never stay ``pending`` with no
message and nothing the relay would look at (on main: 5 of 5 tries stuck for ever).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from celery.signals import before_task_publish
from conftest import Env
from cut_path import CutPath
from sqlalchemy.engine import make_url
from tracked_app import create_app

from celery_tracked import EnqueueError, JobStatus, Tracker
from celery_tracked.core.jobs import utcnow
from tests.conftest import wait_for


@pytest.fixture
def cut_path(env: Env) -> Iterator[CutPath]:
    url = make_url(env.config["broker"])
    path = CutPath((url.host or "127.0.0.1", url.port or 6379))
    yield path
    path.close()


@pytest.fixture
def producer(env: Env, cut_path: CutPath) -> Iterator[Celery]:
    """An app whose broker path goes through ``cut_path`` (the guard and the database are
    reached directly)."""
    url = make_url(env.config["broker"]).set(port=cut_path.port)
    app = create_app({**env.config, "broker": url.render_as_string(hide_password=False)})
    app.conf.broker_connection_timeout = 1.0
    app.conf.task_publish_retry_policy = {"max_retries": 1, "interval_start": 0}
    yield app
    Tracker.for_app(app).close()
    app.close()


def relay_now(env: Env, job_id: str) -> list[str]:
    """Relay passes past the grace period (Beat's relay entry would run them) until one
    publishes something: the relay takes only due rows, judged on the database's clock,
    and the job is due when its debounce delay ends (its ``not_before``)."""
    published: list[str] = []

    def relayed() -> bool:
        later = utcnow() + timedelta(seconds=env.tracker.settings.relay_grace_seconds + 1)
        published.extend(env.tracker.relay(now=later).published)
        return bool(published)

    wait_for(relayed, timeout=15, what=f"a relay pass to publish {job_id} once due")
    return published


@pytest.mark.parametrize("consumed", ["before-the-undo", "after-the-undo"])
def test_a_failed_replacement_never_leaves_a_job_without_message(
    env: Env, start_worker: Any, cut_path: CutPath, producer: Celery, consumed: str
) -> None:
    worker = start_worker()
    task = producer.tasks["acc.debounced"]
    x = uuid.uuid4().hex[:8]
    # the first message waits for its countdown; the second one waits longer, so the
    # replacement's undo comes first
    countdown = 1.0 if consumed == "before-the-undo" else 6.0
    first = task.with_options(options={"countdown": countdown})(x=x, n=1)
    job_id = first.job_id

    def cut_before_the_replacement(headers: dict[str, Any] | None = None, **_: Any) -> None:
        headers = headers or {}
        if headers.get("tracked_job_id") != job_id or not headers.get("tracked_revision"):
            return
        if consumed == "before-the-undo":  # the replaced message is skipped meanwhile
            wait_for(
                lambda: worker.records_of(job_id, "skipped"),
                timeout=20,
                what="the replaced message to be delivered and skipped",
            )
        cut_path.cut()

    before_task_publish.connect(cut_before_the_replacement, weak=False)
    try:
        with pytest.raises(EnqueueError, match="broker publish") as failed:
            task.enqueue(x=x, n=2)
    finally:
        before_task_publish.disconnect(cut_before_the_replacement)
    assert "keeps its previous arguments" in str(failed.value)

    job = env.tracker.get_job(job_id)
    assert job is not None and job.status is JobStatus.PENDING
    assert job.payload["kwargs"] == {"x": x, "n": 1}
    assert (job.revision, job.published_at) == (2, None), env.diagnose(job_id)
    assert relay_now(env, job_id) == [job_id], env.diagnose(job_id)

    env.wait_status(job_id, "completed", timeout=30)
    assert env.tracker.wait(job_id, timeout=5) == {"x": x, "n": 1, "run": 1}
    if consumed == "after-the-undo":
        wait_for(
            lambda: worker.records_of(job_id, "skipped"),
            timeout=20,
            what="the replaced message to be delivered (and skipped)",
        )
    assert env.ran(job_id) == 1
    events = [e.event for e in env.tracker.history(job_id)]
    assert events[:4] == ["enqueued", "debounced", "debounce_undone", "relayed"], events
    assert events[-2:] == ["started", "completed"]
