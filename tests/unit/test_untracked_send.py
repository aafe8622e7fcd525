"""A tracked task sent by name (``app.send_task``, ``celery call``) from a process whose
app is not finalized yet is logged as untracked there too, once per task, with the fix;
the app is left as it was (not finalized, its pending tasks not evaluated)."""

from __future__ import annotations

import logging
import uuid

import pytest
from celery import Celery

from celery_tracked import TrackedTask


def _app(**options: object) -> Celery:
    app = Celery(f"p{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False, **options)
    app.conf.broker_connection_retry_on_startup = False
    return app


def _told(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "sent untracked" in r.getMessage()]


def test_send_task_of_a_pending_tracked_task_is_logged_without_finalizing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app()
    name = f"byname.{uuid.uuid4().hex}"

    @app.task(base=TrackedTask, name=name)
    def ocr(document_id: str) -> None: ...

    @app.task(name=f"{name}.plain")
    def plain(x: int) -> None: ...

    with caplog.at_level(logging.WARNING, logger="celery_tracked"):
        app.send_task(name, kwargs={"document_id": "d-1"})
        app.send_task(name, kwargs={"document_id": "d-2"})
        app.send_task(f"{name}.plain", kwargs={"x": 1})
    told = _told(caplog)
    assert len(told) == 1, told
    assert f"enqueue('{name}', ...)" in told[0] and f"tracked call {name}" in told[0]
    assert not app.finalized and not ocr.__evaluated__()  # the app is left as it was


def test_an_app_wide_tracked_tasks_generated_name_is_recognised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app(task_cls=TrackedTask)

    @app.task
    def resize(image_id: str) -> None: ...

    name = f"{__name__}.resize"
    with caplog.at_level(logging.WARNING, logger="celery_tracked"):
        app.send_task(name, kwargs={"image_id": "i-1"})
    assert len(_told(caplog)) == 1 and not app.finalized
