"""The reaper's pure judgement of waiting jobs (issue 22, items 0 and 8): a retrying job
whose postponed delivery handed its message over again is not stalled; how long after a
first miss a second pass may confirm it."""

from __future__ import annotations

from datetime import datetime, timedelta

from celery_tracked.core.jobs import JobStatus
from celery_tracked.core.settings import Settings
from celery_tracked.services.reaper import stalled_why
from celery_tracked.services.stall import CONFIRM_S, Thresholds, confirm_seconds

from .job_rows import NOW, a_job

LIMITS = Thresholds.of(Settings())


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_a_retrying_job_handed_over_again_lately_is_not_stalled() -> None:
    due_long_ago = a_job(status=JobStatus.RETRYING, not_before=ago(3600), published_at=ago(7200))
    assert stalled_why(due_long_ago, db_now=NOW, now=NOW, limits=LIMITS) is not None
    postponed = a_job(status=JobStatus.RETRYING, not_before=ago(3600), published_at=ago(60))
    assert stalled_why(postponed, db_now=NOW, now=NOW, limits=LIMITS) is None


def test_a_second_pass_confirms_half_an_interval_after_the_first() -> None:
    assert LIMITS.confirm_s == 30.0  # the default 60 s interval: the next Beat pass
    assert confirm_seconds(5) == 2.5
    assert confirm_seconds(0.5) == 1.0  # at least a second
    assert confirm_seconds(0) == CONFIRM_S  # no Beat entry: a fixed half minute
