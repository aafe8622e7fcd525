"""The composition root and the facade (issue 25, item 4): ``wiring.build`` takes an
injected store and guard; the ``Tracker`` offers methods only, its services private
(``tracker._services``, the tests' seam) and the Celery side's narrow ``celery_side``."""

from __future__ import annotations

import inspect
from typing import Any

from celery import Celery

from celery_tracked import Tracker
from celery_tracked.backends.guard import MemoryGuard
from celery_tracked.backends.memory import MemoryStore
from celery_tracked.core.redact import Redaction
from celery_tracked.core.settings import Settings
from celery_tracked.tracker import BaseTracker
from celery_tracked.wiring import MAINTENANCE, build


class NoPlatform:
    """A platform with no tasks, publishing nothing (``core/platform.py``)."""

    def description(self, task_name: str) -> None:
        return None

    def descriptions(self) -> dict[str, Any]:
        return {}

    def show(self, value: Any, limit: int) -> str:
        return repr(value)[:limit]

    def publish(self, *args: Any) -> None: ...

    def forget_result(self, job: Any) -> None:
        return None

    def restore_result(self, job: Any, stored: object) -> None: ...

    def terminate(self, job: Any) -> None: ...

    def ready(self, queue: str) -> None:
        return None

    def held(self, message_ids: Any) -> None:
        return None


def test_build_takes_the_store_and_the_guard_it_is_given() -> None:
    store, guard = MemoryStore(), MemoryGuard("wiring-test")
    settings = Settings(redis_url="redis://127.0.0.1:1/0", database_url="postgresql://nowhere/x")
    services = build(settings, NoPlatform(), store=store, guard=guard)
    try:
        assert services.store is store and services.guard is guard and services.notifier is guard
        assert services.enqueuer.store is store and services.runner.store is store
        assert sorted(services.maintenance) == sorted(plugin.name for plugin in MAINTENANCE)
        side = services.celery_side()
        assert side.sql_store is None, "the memory store: no transactional paths"
        assert side.producer is services.producer and side.runner is services.runner
        assert side.relay_backlog() == 0 and side.eviction_policy() is not None
    finally:
        services.close()


def test_the_facade_is_built_with_an_injected_store() -> None:
    store = MemoryStore()
    settings = Settings(redis_url="memory://", database_url="postgresql://nowhere/x")
    tracker = BaseTracker(settings, NoPlatform(), store=store, guard=MemoryGuard("facade"))
    try:
        assert tracker._services.store is store
        assert tracker.get_job("00000000-0000-0000-0000-000000000000") is None
        assert tracker.settings is settings
    finally:
        tracker.close()


def test_the_tracker_has_methods_only() -> None:
    """No public service attribute: what is public is a method, or a read-only value."""
    app = Celery("wiring", broker="memory://", set_as_current=False)
    app.conf.update(tracked_redis_url="memory://", tracked_database_url="memory://")
    tracker = Tracker.for_app(app)
    try:
        assert [name for name in vars(tracker) if not name.startswith("_")] == []
        values = {"settings", "app", "celery_side", "REREAD_S"}
        public = {name for name in dir(Tracker) if not name.startswith("_")}
        assert all(callable(getattr(Tracker, name)) for name in public - values)
        for name in ("settings", "app", "celery_side"):
            assert isinstance(inspect.getattr_static(Tracker, name), property), name
        assert isinstance(tracker.settings.masking, Redaction)
    finally:
        Tracker.forget(app)


def test_the_redaction_is_built_once_from_the_settings() -> None:
    settings = Settings(redact_keys=("token",))
    assert settings.masking is settings.masking
    assert settings.masking == Redaction(("token",))
    assert settings.masking.redact({"token": "t", "x": 1}) == {"token": "[redacted]", "x": 1}
    off = Redaction(("token",), on=False)
    assert off.keys == () and off.redact({"token": "t"}) == {"token": "t"}


def test_a_cancel_reason_is_stored_with_its_secrets_masked() -> None:
    from celery_tracked.core.jobs import JobStatus
    from tests.unit.job_rows import a_job

    store = MemoryStore()
    settings = Settings(redis_url="memory://", database_url="memory://")
    tracker = BaseTracker(settings, NoPlatform(), store=store, guard=MemoryGuard("cancel"))
    try:
        store.put(a_job(id="00000000-0000-0000-0000-00000000000c", status=JobStatus.PENDING))
        reason = "provider down, password=hunter2 https://admin:s3cr3t@status.example/x"
        assert tracker.cancel("00000000-0000-0000-0000-00000000000c", reason)
        job = tracker.get_job("00000000-0000-0000-0000-00000000000c")
        assert job is not None and job.error_message is not None
        assert "hunter2" not in job.error_message and "s3cr3t" not in job.error_message
        assert job.error_message.startswith("provider down")
    finally:
        tracker.close()
