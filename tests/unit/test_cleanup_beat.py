"""The cleanup's default Beat entry (issue 13, item 1): daily at 03:17, never over the
user's own entry of that name, off with one setting; added beside the relay's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_tracked import tracked_task
from celery_tracked.adapter.beat import CLEANUP_TASK, RELAY_TASK

pytestmark = pytest.mark.filterwarnings("ignore::celery.exceptions.DuplicateTaskNameWarning")


def schedule_of(**conf: Any) -> dict[str, Any]:
    """The Beat schedule of a configured app with one tracked task and ``conf``."""
    app = Celery("beat", broker="memory://", set_as_current=False)
    app.conf.update(tracked_redis_url="memory://", **conf)

    @tracked_task(app=app, shared=False, name="beat.work")
    def work() -> None: ...

    app.finalize()
    return dict(app.conf.beat_schedule)


def test_the_default_entry_runs_the_cleanup_daily_at_03_17() -> None:
    entry = schedule_of()[CLEANUP_TASK]
    assert entry["task"] == CLEANUP_TASK
    assert entry["schedule"] == crontab(minute=17, hour=3)
    assert RELAY_TASK in schedule_of(), "the relay's entry is still there"


def test_a_user_entry_of_that_name_wins() -> None:
    mine = {"task": CLEANUP_TASK, "schedule": crontab(minute=0, hour=5), "args": ()}
    entry = schedule_of(beat_schedule={CLEANUP_TASK: mine})[CLEANUP_TASK]
    assert entry == mine


def test_a_user_entry_of_another_name_stays_beside_it() -> None:
    mine = {"task": "beat.work", "schedule": 60.0}
    schedule = schedule_of(beat_schedule={"my-entry": mine})
    assert schedule["my-entry"] == mine and CLEANUP_TASK in schedule


@pytest.mark.parametrize("off", [False, None, 0, "off"])
def test_one_setting_turns_it_off(off: Any) -> None:
    schedule = schedule_of(tracked_cleanup_schedule=off)
    assert CLEANUP_TASK not in schedule and RELAY_TASK in schedule


def test_seconds_and_crontab_strings_and_schedules() -> None:
    entry = schedule_of(tracked_cleanup_schedule=2)[CLEANUP_TASK]
    assert entry["schedule"] == 2.0 and entry["options"]["expires"] == 2.0
    entry = schedule_of(tracked_cleanup_schedule=timedelta(hours=6))[CLEANUP_TASK]
    assert entry["schedule"] == 21600.0
    entry = schedule_of(tracked_cleanup_schedule="*/10 1-5 * * mon")[CLEANUP_TASK]
    assert entry["schedule"] == crontab(minute="*/10", hour="1-5", day_of_week="mon")
    entry = schedule_of(tracked_cleanup_schedule="0  4 31 * *")[CLEANUP_TASK]  # cron's order
    assert entry["schedule"] == crontab(minute=0, hour=4, day_of_month=31)
    mine = crontab(minute=30, hour=4)
    assert schedule_of(tracked_cleanup_schedule=mine)[CLEANUP_TASK]["schedule"] is mine


def test_a_bad_schedule_leaves_the_entry_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert CLEANUP_TASK not in schedule_of(tracked_cleanup_schedule="99 3 * * *")
    assert "no default Beat entries for" in caplog.text and "celery_tracked.cleanup" in caplog.text
    assert "tracked_cleanup_schedule is invalid" in caplog.text
