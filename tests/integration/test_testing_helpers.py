"""The testing plugin's pieces (``celery_tracked.testing``) in our own suite: the memory
store behind ``tracked_database_url = "memory://"``, a user's own app under
``tracked_test_app`` (its settings and current app put back, its queues purged), what
the helpers say when an assertion fails, and that ``import celery_tracked`` imports no
pytest (issue 16)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, current_app

from celery_tracked import ConfigurationError, JobStatus, Tracker, tracked_task
from celery_tracked.backends.memory import MemoryStore
from celery_tracked.store.migrate import downgrade, upgrade
from celery_tracked.testing import (
    SQLITE,
    TrackedTesting,
    purge_queues,
    tracked_settings,
    tracked_test_app,
)


@pytest.fixture
def own_app() -> Iterator[Celery]:
    """A user's own app (not Celery's test app), with its own settings."""
    app = Celery("own", broker="memory://", set_as_current=False)
    app.conf.update(tracked_redis_url="redis://example.invalid:6379/0", task_default_queue="own")
    yield app
    app.close()


def test_memory_url_wires_the_memory_store_and_nothing_survives_the_tracker(
    own_app: Celery,
) -> None:
    @tracked_task(app=own_app, shared=False, idempotency_key="k:{n}")
    def job(n: int) -> int:
        return n

    for _ in range(2):  # two "runs": the same key is a new job each time
        with tracked_test_app(own_app, tracked_settings()) as app:
            tracked = TrackedTesting(app)
            assert isinstance(tracked.tracker._services.store, MemoryStore)
            result = job.enqueue(1)
            assert result.created
            assert [j.id for j in tracked.run_enqueued()] == [result.job_id]
            assert tracked.assert_status(result, JobStatus.COMPLETED).result == 1


def test_an_own_app_gets_its_settings_current_app_and_empty_queues_back(
    own_app: Celery, tmp_path: Path
) -> None:
    @tracked_task(app=own_app, shared=False)
    def job(n: int) -> int:
        return n

    before = current_app._get_current_object()  # type: ignore[attr-defined]
    config = tracked_settings(SQLITE, tmp_path)
    with tracked_test_app(own_app, config) as app:
        assert current_app._get_current_object() is app  # type: ignore[attr-defined]
        assert app.conf.tracked_database_url.startswith(f"sqlite:///{tmp_path}")
        Tracker.for_app(app)
        job.delay(1)  # enqueued, never run
        tracked = TrackedTesting(app)
        tracked.assert_enqueued(job, n=1)
    assert current_app._get_current_object() is before  # type: ignore[attr-defined]
    assert own_app.conf.tracked_redis_url == "redis://example.invalid:6379/0"
    assert own_app.conf.get("tracked_database_url") is None
    assert own_app.__dict__.get("_celery_tracked_tracker") is None  # forgotten
    with own_app.connection_for_write() as connection:  # the message was purged
        assert connection.default_channel.queue_declare("own", passive=True).message_count == 0
    purge_queues(own_app)  # nothing to purge: no error


def test_assertions_say_what_they_found(tracked: TrackedTesting) -> None:
    @tracked_task(app=tracked.app, shared=False)
    def send(to: str, body: str = "hi", **extra: Any) -> None:
        return None

    with pytest.raises(AssertionError, match=r"no .*send job enqueued with \{'to': 'a'\}"):
        tracked.assert_enqueued(send, to="a")
    send.delay("a")
    send.delay("a", body="again", tag="x")
    assert tracked.assert_enqueued(send, to="a", tag="x").payload["kwargs"]["tag"] == "x"
    with pytest.raises(AssertionError, match=r"2 .*send jobs match"):
        tracked.assert_enqueued(send, to="a")
    with pytest.raises(AssertionError, match="jobs enqueued with"):
        tracked.assert_not_enqueued(send, body="again")
    with pytest.raises(AssertionError, match="is pending, not completed"):
        tracked.assert_status(tracked.enqueued(send)[0], "completed")
    with pytest.raises(AssertionError, match="no job "):
        tracked.job("00000000-0000-0000-0000-000000000000")


def test_run_enqueued_fails_listing_the_jobs_still_open(tracked: TrackedTesting) -> None:
    @tracked_task(app=tracked.app, shared=False)
    def later() -> None:
        return None

    result = later.apply_async(countdown=30)
    with pytest.raises(AssertionError, match=rf"still open after 0.2 s: .*{result.id}"):
        tracked.run_enqueued(timeout=0.2)


def test_run_enqueued_raises_the_error_of_a_worker_that_died(
    tracked: TrackedTesting, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery.worker import loops

    def broken_loop(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the worker's own error")

    monkeypatch.setattr(loops, "synloop", broken_loop)
    monkeypatch.setattr(loops, "asynloop", broken_loop)

    @tracked_task(app=tracked.app, shared=False)
    def never_run() -> None:
        return None

    never_run.delay()
    with pytest.raises(AssertionError, match="worker died: RuntimeError") as raised:
        tracked.run_enqueued(timeout=5)
    assert isinstance(raised.value.__cause__, RuntimeError)


def test_sqlite_settings_take_a_str_or_a_path_directory(tmp_path: Path) -> None:
    for directory in (str(tmp_path), tmp_path):
        url = tracked_settings(SQLITE, directory)["tracked_database_url"]
        assert url.startswith(f"sqlite:///{tmp_path}/")


def test_memory_has_no_tables_to_migrate() -> None:
    upgrade("memory://")  # nothing to do, no error: a suite's "create the tables" step
    downgrade("memory://", "base")


def test_a_bad_database_choice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="expected 'memory', 'sqlite' or a database"):
        tracked_settings("postgres")
    with pytest.raises(ConfigurationError, match="needs a directory"):
        tracked_settings(SQLITE)
    assert list(tmp_path.iterdir()) == []


def test_importing_the_package_imports_no_pytest() -> None:
    code = (
        "import sys, celery_tracked, celery_tracked.testing; "
        "assert 'pytest' not in sys.modules, 'pytest imported'"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


class TestAUsersOwnFixtures:
    """A user's ``celery_config`` keeps configuring the test app; the plugin's
    ``tracked_config`` wins for the ``tracked_*`` settings; an override of
    ``tracked_config`` built on the plugin's (a real Redis guard) keeps the per-test key
    prefix."""

    @pytest.fixture
    def celery_config(self) -> dict[str, Any]:
        return {
            "task_default_queue": "mine",
            "tracked_database_url": "postgresql+psycopg://nobody@127.0.0.1:1/none",
        }

    @pytest.fixture
    def tracked_config(self, tracked_config: dict[str, Any], redis_url: str) -> dict[str, Any]:
        return {**tracked_config, "tracked_redis_url": redis_url}

    def test_both_apply(self, tracked: TrackedTesting, redis_url: str) -> None:
        from celery_tracked.backends.guard import RedisGuard

        @tracked_task(app=tracked.app, shared=False, idempotency_key="same")
        def job() -> str:
            return "done"

        settings = tracked.tracker.settings
        assert (settings.database_url, settings.redis_url) == ("memory://", redis_url)
        assert settings.key_prefix.startswith("test-")
        assert isinstance(tracked.tracker._services.guard, RedisGuard)
        first, again = job.enqueue(), job.enqueue()
        assert first.created and not again.created
        assert tracked.assert_enqueued(job).queue_name == "mine"
        assert [j.result for j in tracked.run_enqueued()] == ["done"]
