"""Retention, pure (issue 13, item 1): which statuses, ages and keep-newest rows a cleanup
removes; ``retention=`` checked at decoration; the cleanup's settings."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_tracked import ConfigurationError, InvalidTaskOption, TrackedTask, tracked_task
from celery_tracked.backends.guard import MemoryGuard
from celery_tracked.core.cleanup import (
    ENDED,
    Boundary,
    Policy,
    Sweep,
    TaskRetention,
    policy_of,
    sweeps,
    task_retention,
)
from celery_tracked.core.settings import Settings
from celery_tracked.services.cleanup import CleanupReport, guard_entry, task_retentions
from celery_tracked.store.cleanup import Removed

NOW = datetime(2030, 1, 10, 12, 0, tzinfo=timezone.utc)
DAY = timedelta(days=1)
HOURS = timedelta(hours=1)


def default_policy(**per_task: Any) -> Policy:
    return policy_of(7 * DAY, 30 * DAY, per_task.items(), keep_newest=0)


def removed(
    policy: Policy,
    status: str,
    age: timedelta,
    task: str = "t",
    queue: str = "q",
    job_id: str = "j",
    boundaries: list[tuple[str, Boundary]] | None = None,
) -> bool:
    """Whether a row of ``status`` that ended ``age`` ago is removed now."""
    found = sweeps(policy, NOW, boundaries or [])
    return sum(s.admits(status, task, queue, NOW - age, job_id) for s in found) == 1


# -- statuses and default ages ------------------------------------------------------------


@pytest.mark.parametrize("status", ["pending", "processing", "retrying"])
def test_an_active_job_is_never_removed_whatever_its_age(status: str) -> None:
    assert not removed(default_policy(), status, 3650 * DAY)
    assert all(s.status in ENDED for s in sweeps(default_policy(), NOW))


def test_completed_jobs_go_after_seven_days_failed_and_cancelled_after_thirty() -> None:
    policy = default_policy()
    assert removed(policy, "completed", 7 * DAY + timedelta(seconds=1))
    assert not removed(policy, "completed", 7 * DAY - timedelta(seconds=1))
    for status in ("failed", "cancelled"):
        assert removed(policy, status, 30 * DAY + timedelta(seconds=1))
        assert not removed(policy, status, 29 * DAY)


def test_a_row_without_finished_at_is_never_removed() -> None:
    assert not any(
        s.admits("completed", "t", "q", None, "j") for s in sweeps(default_policy(), NOW)
    )


def test_sweeps_never_overlap_so_a_row_is_counted_once() -> None:
    policy = default_policy(a=1, b={"completed": 2, "failed": None}, c=7)
    for status in ENDED:
        for task in ("a", "b", "c", "other"):
            for age in (0.5, 1.5, 2.5, 8, 31, 400):
                hits = [
                    s
                    for s in sweeps(policy, NOW)
                    if s.admits(status, task, "q", NOW - age * DAY, "j")
                ]
                assert len(hits) <= 1, (status, task, age, hits)


# -- per-task retention -----------------------------------------------------------------------


def test_a_task_duration_applies_to_every_ended_status() -> None:
    policy = default_policy(short=timedelta(days=1), long=90)
    for status in ENDED:
        assert removed(policy, status, 2 * DAY, task="short")
        assert not removed(policy, status, 12 * HOURS, task="short")
        assert not removed(policy, status, 60 * DAY, task="long")
        assert removed(policy, status, 91 * DAY, task="long")


def test_a_task_mapping_overrides_only_the_statuses_it_names() -> None:
    policy = default_policy(t={"completed": 1, "cancelled": None})
    assert removed(policy, "completed", 2 * DAY)  # its own: 1 day
    assert not removed(policy, "failed", 20 * DAY)  # the app's 30 days
    assert removed(policy, "failed", 31 * DAY)
    assert not removed(policy, "cancelled", 3650 * DAY)  # kept forever
    assert not removed(policy, "completed", 2 * DAY, task="other")  # others keep 7 days


def test_an_override_equal_to_the_default_adds_no_sweep() -> None:
    assert len(sweeps(default_policy(t=7), NOW)) == len(sweeps(default_policy(), NOW)) + 2
    same = sweeps(default_policy(t={"completed": 7}), NOW)
    assert [s.status for s in same] == list(ENDED)


def test_tasks_sharing_an_age_share_a_sweep() -> None:
    found = sweeps(default_policy(a={"completed": 1}, b={"completed": 1}), NOW)
    completed = [s for s in found if s.status == "completed"]
    assert [(s.tasks, s.other_than) for s in completed] == [((), ("a", "b")), (("a", "b"), ())]


@pytest.mark.parametrize(
    "value",
    [
        -1,
        float("nan"),
        float("inf"),
        True,
        "7",
        "7 days",
        timedelta(days=-1),
        timedelta(days=40_000),
        {"done": 1},
        {"pending": 1},
        {"completed": "1"},
        {"failed": -3},
        [1],
    ],
)
def test_a_bad_retention_is_refused_at_decoration(value: Any) -> None:
    app = Celery("ret", broker="memory://", set_as_current=False)
    with pytest.raises(InvalidTaskOption) as info:
        tracked_task(app=app, retention=value)(lambda x: x)
    assert info.value.setting == "retention"
    with pytest.raises(InvalidTaskOption):
        type("Bad", (TrackedTask,), {"retention": value})


def test_good_retentions_are_accepted_and_read_back() -> None:
    app = Celery("ret", broker="memory://", set_as_current=False)

    def body() -> int:
        return 1

    short = tracked_task(app=app, shared=False, name="ret.short", retention=timedelta(hours=6))(
        body
    )
    mixed = tracked_task(
        app=app, shared=False, name="ret.mixed", retention={"failed": 90, "cancelled": None}
    )(body)
    plain = tracked_task(app=app, shared=False, name="ret.plain")(body)

    @app.task(name="ret.celery", shared=False)
    def not_tracked() -> None: ...

    found = dict(task_retentions({t.name: t for t in (short, mixed, plain, not_tracked)}))
    assert set(found) == {"ret.short", "ret.mixed", "ret.plain"}, "tracked tasks only"
    assert found["ret.plain"] is None
    assert task_retention(found["ret.short"]) == TaskRetention(
        tuple((s, timedelta(hours=6)) for s in ENDED)
    )
    assert task_retention(found["ret.mixed"]) == TaskRetention(
        (("failed", timedelta(days=90)), ("cancelled", None))
    )


# -- keep the newest K per queue and status ---------------------------------------------------


def test_keep_newest_removes_only_rows_older_than_the_kth_newest_of_their_queue() -> None:
    policy = policy_of(7 * DAY, 30 * DAY, [], keep_newest=2)
    # queue "a" holds >= 2 completed rows; its 2nd newest ended 20 days ago (id "m")
    bounds = [("completed", Boundary("a", NOW - 20 * DAY, "m"))]
    assert removed(policy, "completed", 21 * DAY, queue="a", boundaries=bounds)
    assert not removed(policy, "completed", 20 * DAY, queue="a", job_id="m", boundaries=bounds)
    assert removed(policy, "completed", 20 * DAY, queue="a", job_id="l", boundaries=bounds)
    assert not removed(policy, "completed", 20 * DAY, queue="a", job_id="n", boundaries=bounds)
    assert not removed(policy, "completed", 10 * DAY, queue="b", boundaries=bounds), (
        "queue b has fewer than 2 completed rows: all kept"
    )
    assert not removed(policy, "failed", 300 * DAY, queue="a", boundaries=bounds)
    assert [s.status for s in sweeps(policy, NOW, bounds)] == ["completed"]


def test_keep_newest_still_respects_the_age() -> None:
    policy = policy_of(7 * DAY, 30 * DAY, [], keep_newest=1)
    bounds = [("completed", Boundary("a", NOW - DAY, "m"))]
    assert not removed(policy, "completed", 3 * DAY, queue="a", boundaries=bounds)
    assert removed(policy, "completed", 8 * DAY, queue="a", boundaries=bounds)


def test_a_sweep_states_its_own_condition() -> None:
    sweep = Sweep("failed", NOW, tasks=("a",))
    assert sweep.admits("failed", "a", "q", NOW - DAY, "x")
    assert not sweep.admits("failed", "b", "q", NOW - DAY, "x")
    assert not sweep.admits("failed", "a", "q", NOW, "x"), "strictly older"


# -- settings and report ------------------------------------------------------------------------


def settings(**conf: Any) -> Settings:
    return Settings.from_conf({"tracked_redis_url": "memory://", **conf}, {})


def test_cleanup_settings_defaults() -> None:
    s = settings()
    assert s.cleanup_schedule == "17 3 * * *"
    assert (s.retention_completed_days, s.retention_failed_days) == (7.0, 30.0)
    assert (s.retention_keep_newest, s.cleanup_batch_size) == (0, 5000)


@pytest.mark.parametrize("off", [False, None, 0, "0", "off", "OFF", "none"])
def test_the_cleanup_schedule_turns_off(off: Any) -> None:
    assert settings(tracked_cleanup_schedule=off).cleanup_schedule is None


def test_the_cleanup_schedule_from_the_environment() -> None:
    env = {"CELERY_TRACKED_CLEANUP_SCHEDULE": "2.5"}
    assert Settings.from_conf({"tracked_redis_url": "memory://"}, env).cleanup_schedule == 2.5
    env = {"CELERY_TRACKED_CLEANUP_SCHEDULE": "off"}
    assert Settings.from_conf({"tracked_redis_url": "memory://"}, env).cleanup_schedule is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tracked_cleanup_schedule", True),
        ("tracked_cleanup_schedule", "61 3 * * *"),
        ("tracked_cleanup_schedule", -5),
        ("tracked_cleanup_schedule", "daily"),
        ("tracked_retention_completed_days", -1),
        ("tracked_retention_failed_days", 40_000),
        ("tracked_retention_keep_newest", -1),
        ("tracked_cleanup_batch_size", 0),
        ("tracked_cleanup_batch_size", 10_001),
    ],
)
def test_bad_cleanup_settings_are_refused(name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError) as info:
        settings(**{name: value})
    assert info.value.setting == name


def test_the_report_as_json() -> None:
    report = CleanupReport(events=9, batches=2, duration_s=1.23456)
    report.removed["completed"] = 3
    assert report.total == 3
    assert report.as_dict() == {
        "removed": {"completed": 3, "failed": 0, "cancelled": 0},
        "total": 3,
        "events": 9,
        "guard_entries": 0,
        "batches": 2,
        "duration_s": 1.235,
        "dry_run": False,
    }
    assert "removed 3 jobs (completed 3, failed 0, cancelled 0)" in report.describe()


def test_guard_entries_only_for_keyed_jobs_young_enough_to_still_hold_one() -> None:
    guard = MemoryGuard()
    since = NOW - DAY
    young = Removed("j", "t", "k:1", NOW - HOURS)
    assert guard_entry(guard, young, since) == ("celery_tracked:guard:t:k:1", "j")
    assert guard_entry(guard, Removed("j", "t", None, NOW), since) is None, "no key"
    assert guard_entry(guard, Removed("j", "t", "k:1", NOW - 2 * DAY), since) is None, (
        "its entry expired a day ago"
    )
