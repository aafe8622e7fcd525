"""The reaper's pure decisions (``celery_tracked.reaper``): when a row looks stalled, which
waiting jobs' messages are presumed lost, rescue or abandon."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from celery_tracked.core.jobs import Job, JobStatus
from celery_tracked.core.redact import REDACTED
from celery_tracked.core.settings import Settings
from celery_tracked.services.reaper import (
    Action,
    ReapReport,
    Thresholds,
    asks_broker,
    decide,
    presumed_lost,
    stalled_why,
)

from .job_rows import NOW, a_job

LIMITS = Thresholds(
    lease_grace_s=15.0, processing_s=60.0, pending_s=600.0, retrying_s=300.0, max_rescues=5
)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def stalled(job: Job, now: datetime = NOW) -> str | None:
    return stalled_why(job, db_now=NOW, now=now, limits=LIMITS)


def test_the_thresholds_come_from_the_settings_with_the_takeover_grace() -> None:
    limits = Thresholds.of(Settings(lease_seconds=60.0, reaper_processing_seconds=60.0))
    assert limits.lease_grace_s == 15.0  # a quarter lease of takeover grace, then 60 s
    assert limits.cutoff(JobStatus.PROCESSING, NOW) == ago(75)
    assert (limits.pending_s, limits.retrying_s, limits.max_rescues) == (600.0, 300.0, 5)


# -- stalled_why: the row alone ------------------------------------------------------------


def test_a_live_lease_is_never_stalled_however_old_the_job() -> None:
    running = a_job(
        status=JobStatus.PROCESSING,
        attempts_made=1,
        created_at=ago(86_400),
        updated_at=ago(86_400),
        locked_until=NOW + timedelta(seconds=40),  # renewed by a long body
    )
    assert stalled(running) is None


def test_a_lapsed_lease_stalls_only_after_the_grace() -> None:
    def lapsed(seconds: float) -> Job:
        return a_job(status=JobStatus.PROCESSING, attempts_made=1, locked_until=ago(seconds))

    assert stalled(lapsed(74)) is None
    why = stalled(lapsed(76))
    assert why is not None and "attempt 1 was lost" in why and "expired" in why


def test_a_released_lease_stalls_once_quiet_for_the_grace() -> None:
    def released(seconds: float) -> Job:
        return a_job(status=JobStatus.PROCESSING, attempts_made=1, updated_at=ago(seconds))

    assert stalled(released(10)) is None
    assert stalled(released(80))


def test_a_pending_job_stalls_only_long_after_its_message_was_handed_over() -> None:
    assert stalled(a_job(published_at=ago(599))) is None
    why = stalled(a_job(published_at=ago(601)))
    assert why is not None and "handed to the broker 601 s ago" in why


def test_a_pending_job_never_handed_over_is_the_relays() -> None:
    assert stalled(a_job(published_at=None, created_at=ago(10_000))) is None


def test_a_retrying_job_due_in_the_future_or_lately_is_not_stalled() -> None:
    future = a_job(status=JobStatus.RETRYING, attempts_made=1, not_before=NOW + timedelta(hours=1))
    assert stalled(future) is None
    assert stalled(a_job(status=JobStatus.RETRYING, not_before=ago(299))) is None
    why = stalled(a_job(status=JobStatus.RETRYING, not_before=ago(301)))
    assert why is not None and "due 301 s ago" in why


def test_a_given_now_judges_the_patience_but_a_lease_lapses_only_on_the_database_clock() -> None:
    later = NOW + timedelta(hours=2)
    assert stalled(a_job(published_at=ago(1)), now=later)
    live = a_job(status=JobStatus.PROCESSING, locked_until=NOW + timedelta(seconds=30))
    assert stalled(live, now=later) is None
    in_grace = a_job(status=JobStatus.PROCESSING, locked_until=ago(10))  # takeover grace 15 s
    assert stalled(in_grace, now=later) is None
    lapsed = a_job(status=JobStatus.PROCESSING, locked_until=ago(20))
    assert stalled(lapsed) is None and stalled(lapsed, now=later)


def test_ended_jobs_are_never_stalled() -> None:
    for status in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED):
        assert stalled(a_job(status=status, published_at=ago(10_000))) is None


# -- presumed_lost: what the broker says ---------------------------------------------------


def waiting(n: int) -> list[Job]:
    """``n`` stalled pending jobs ``j0``... handed over oldest first."""
    return [a_job(id=f"j{i}", celery_task_id=f"j{i}", published_at=ago(1000 - i)) for i in range(n)]


def ids(jobs: list[Job]) -> list[str]:
    return [j.id for j in jobs]


def test_an_empty_queue_and_no_live_holder_means_every_message_is_lost() -> None:
    assert ids(presumed_lost(waiting(3), set(), 0)) == ["j0", "j1", "j2"]


def test_a_message_a_live_worker_holds_is_not_lost() -> None:
    """Prefetched, or scheduled for a countdown/eta: its worker will run it."""
    lost = presumed_lost(waiting(3), {"j1"}, 0)
    assert ids(lost) == ["j0", "j2"]


def test_a_backlog_is_not_reshuffled() -> None:
    """Ready messages in the queue may be these jobs': only what they cannot account for
    is lost, the oldest first (a FIFO queue keeps the newest longest)."""
    assert presumed_lost(waiting(3), set(), 3) == []
    assert presumed_lost(waiting(3), set(), 50) == []
    assert ids(presumed_lost(waiting(3), set(), 1)) == ["j0", "j1"]


def test_nothing_is_lost_when_the_broker_cannot_say() -> None:
    assert presumed_lost(waiting(3), None, 0) == []
    assert presumed_lost(waiting(3), set(), None) == []


def test_a_replacement_is_found_by_its_messages_task_id() -> None:
    job = a_job(id="job", celery_task_id="replacer-task", published_at=ago(1000))
    assert presumed_lost([job], {"replacer-task"}, 0) == []
    assert presumed_lost([job], {"job"}, 0) == [job]


# -- decide: rescue or abandon -------------------------------------------------------------


def test_a_stalled_job_with_attempts_left_is_rescued() -> None:
    run = a_job(status=JobStatus.PROCESSING, attempts_made=2, max_attempts=3)
    assert decide(run, 0, LIMITS).action is Action.RESCUE
    assert decide(a_job(published_at=ago(1000)), 4, LIMITS).action is Action.RESCUE


def test_a_lost_last_attempt_is_abandoned() -> None:
    run = a_job(status=JobStatus.PROCESSING, attempts_made=1, max_attempts=1)
    decision = decide(run, 0, LIMITS)
    assert decision.action is Action.ABANDON and "no attempts remain" in decision.why


def test_a_pending_job_uses_no_attempt_only_the_rescue_cap_ends_it() -> None:
    assert decide(a_job(max_attempts=1), 0, LIMITS).action is Action.RESCUE
    capped = decide(a_job(), 5, LIMITS)
    assert capped.action is Action.ABANDON and "tracked_reaper_max_rescues=5" in capped.why
    none_allowed = Thresholds(15.0, 60.0, 600.0, 300.0, max_rescues=0)
    assert decide(a_job(), 0, none_allowed).action is Action.ABANDON


def test_redacted_arguments_cannot_be_sent_again() -> None:
    payload = json.dumps({"args": [], "kwargs": {"password": REDACTED}})
    secret = a_job(payload_json=payload)
    decision = decide(secret, 0, LIMITS)
    assert decision.action is Action.ABANDON and "tracker.retry" in decision.why


def test_the_broker_is_asked_before_a_run_with_redacted_arguments_is_abandoned() -> None:
    """Its original message is the only one carrying its arguments: if it is back in its
    queue (RabbitMQ at once) or held by a live worker, that delivery takes the run over."""
    payload = json.dumps({"args": [], "kwargs": {"password": REDACTED}})
    run = {"status": JobStatus.PROCESSING, "locked_until": ago(1000)}
    assert asks_broker(a_job(payload_json=payload, attempts_made=1, **run))
    assert not asks_broker(a_job(payload_json=payload, attempts_made=3, max_attempts=3, **run))
    assert not asks_broker(a_job(attempts_made=1, **run))  # re-sent from its row instead
    assert asks_broker(a_job(published_at=ago(1000)))  # every waiting job


def test_the_report_as_a_dict() -> None:
    report = ReapReport(rescued=["a"], abandoned=["b"], left=["c"])
    assert report.as_dict() == {
        "rescued": ["a"],
        "abandoned": ["b"],
        "left": ["c"],
        "unpublished": [],
        "cancelled": [],
    }
