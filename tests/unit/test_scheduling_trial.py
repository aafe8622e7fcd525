"""Issue 26, the new-user trial's findings on scheduling and control, on the in-memory
store (no service): each error names what the caller gave and says what is allowed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from celery_tracked import InvalidPayload, Tracker, tracked_task

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("trial", broker="memory://", set_as_current=False)
    app.conf.update(
        tracked_database_url="memory://",
        tracked_redis_url="memory://",
        tracked_schedule_horizon_seconds=300,
    )
    yield app


def _task(app: Celery, name: str = "trial.remind", **options: Any) -> Any:
    @tracked_task(app=app, shared=False, name=name, **options)
    def remind(who: str) -> str:
        return who

    return remind


def test_a_deadline_error_names_the_option_the_caller_gave(app: Celery) -> None:
    remind = _task(app, deadline=timedelta(minutes=5))
    tracker = Tracker.for_app(app)
    with pytest.raises(InvalidPayload) as own:  # the task's option, not the call's
        remind.apply_async(args=("a",), countdown=3600)
    assert "the task's deadline option of trial.remind" in str(own.value)
    assert "_deadline" not in str(own.value)
    with pytest.raises(InvalidPayload, match=r"^deadline must be a positive span"):
        remind.with_options(deadline=-3)("a")
    with pytest.raises(InvalidPayload, match=r"^deadline must be a positive span"):
        remind.apply_async(args=("a",), deadline=-3)
    with pytest.raises(InvalidPayload, match=r"^_deadline must be a positive span"):
        remind.apply_async(args=("a",), _deadline=-3)
    with pytest.raises(InvalidPayload, match=r"^_deadline must be a positive span"):
        remind.enqueue("a", _deadline=-3)
    with pytest.raises(InvalidPayload, match=r"^deadline \(.*\) is not after the job's due"):
        remind.with_options(deadline=60, options={"countdown": 3600})("a")
    assert tracker.jobs().jobs == ()
