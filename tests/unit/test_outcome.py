"""The pure classification of how a body ended, and the delays: no service involved."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from functools import partial

import pytest
from celery.exceptions import Ignore, MaxRetriesExceededError, Reject, Retry

from celery_tracked import Unrecoverable
from celery_tracked.adapter.celery_signals import CELERY_SIGNALS
from celery_tracked.core import outcomes
from celery_tracked.core.outcomes import Plan, Write
from celery_tracked.core.retry_policy import backoff_ms

# the pure decisions, reading Celery's control exceptions as the adapter's runs do
plan_outcome = partial(outcomes.plan_outcome, signals=CELERY_SIGNALS)
retry_cause = partial(outcomes.retry_cause, signals=CELERY_SIGNALS)
final_error = partial(outcomes.final_error, signals=CELERY_SIGNALS)


def retry_delay_ms(retry: Retry, now: datetime | None = None, sent: datetime | None = None) -> int:
    signal = CELERY_SIGNALS.read(retry)
    assert signal is not None
    return outcomes.retry_delay_ms(signal, now=now, sent=sent)


def backoff(attempt: int) -> int:
    """A backoff whose value tells which attempt it was asked about."""
    return 1000 * attempt + 7


# -- plan_outcome: every case ---------------------------------------------------------


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 1), (1, 3), (3, 3), (5, 3)])
def test_success_completes_whatever_the_attempt(attempt: int, max_attempts: int) -> None:
    assert plan_outcome(None, attempt, max_attempts, backoff) == Plan(Write.COMPLETE)


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 3), (3, 3)])
def test_ignore_completes_and_is_reraised(attempt: int, max_attempts: int) -> None:
    plan = plan_outcome(Ignore(), attempt, max_attempts, backoff)
    assert plan == Plan(Write.COMPLETE, reraise=True, note="ignored or replaced")


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 3), (3, 3)])
def test_reject_requeue_releases_the_lease(attempt: int, max_attempts: int) -> None:
    plan = plan_outcome(Reject("again", requeue=True), attempt, max_attempts, backoff)
    assert plan == Plan(Write.RELEASE, reraise=True)


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 3), (3, 3)])
def test_reject_without_requeue_fails_even_with_attempts_left(
    attempt: int, max_attempts: int
) -> None:
    plan = plan_outcome(Reject("bad", requeue=False), attempt, max_attempts, backoff)
    assert plan == Plan(Write.FAIL, reraise=True)


@pytest.mark.parametrize(("countdown", "expected_ms"), [(5, 5000), (0.25, 250), (0, 0)])
def test_retry_with_attempts_left_uses_its_countdown(countdown: float, expected_ms: int) -> None:
    retry = Retry(exc=ValueError("x"), when=countdown)
    plan = plan_outcome(retry, 1, 3, backoff)
    assert plan == Plan(Write.RETRY, delay_ms=expected_ms, reraise=True)


@pytest.mark.parametrize("aware", [True, False])
def test_retry_with_attempts_left_uses_its_eta(aware: bool) -> None:
    eta = datetime.now(timezone.utc) + timedelta(seconds=30)
    retry = Retry(exc=ValueError("x"), when=eta if aware else eta.replace(tzinfo=None))
    plan = plan_outcome(retry, 2, 3, backoff)
    assert plan.write is Write.RETRY and plan.reraise
    assert plan.delay_ms is not None and 28_000 <= plan.delay_ms <= 30_000


@pytest.mark.parametrize(("attempt", "max_attempts"), [(3, 3), (4, 3), (1, 1)])
def test_retry_on_the_last_attempt_fails(attempt: int, max_attempts: int) -> None:
    plan = plan_outcome(Retry(exc=ValueError("x"), when=5), attempt, max_attempts, backoff)
    assert plan == Plan(Write.FAIL, reraise=True)


@pytest.mark.parametrize("max_attempts", [1, 3, 10])
def test_unrecoverable_fails_on_the_first_attempt(max_attempts: int) -> None:
    plan = plan_outcome(Unrecoverable("no"), 1, max_attempts, backoff)
    stopped = "not retried: Unrecoverable ends its job"
    assert plan == Plan(Write.FAIL, reraise=True, note=None if max_attempts == 1 else stopped)


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 3), (2, 3), (1, 2), (4, 10)])
def test_error_with_attempts_left_retries_after_the_backoff_of_that_attempt(
    attempt: int, max_attempts: int
) -> None:
    plan = plan_outcome(ValueError("x"), attempt, max_attempts, backoff)
    assert plan == Plan(Write.RETRY, delay_ms=backoff(attempt))
    assert not plan.reraise  # the runner re-publishes the retry itself


@pytest.mark.parametrize(("attempt", "max_attempts"), [(3, 3), (1, 1), (4, 3)])
def test_error_on_the_last_attempt_fails(attempt: int, max_attempts: int) -> None:
    assert plan_outcome(KeyError("x"), attempt, max_attempts, backoff) == Plan(
        Write.FAIL, reraise=True
    )


def test_the_backoff_is_only_asked_about_plain_errors_with_attempts_left() -> None:
    asked: list[int] = []

    def spy(attempt: int) -> int:
        asked.append(attempt)
        return 1

    for error in (None, Ignore(), Reject(requeue=True), Retry(when=1), Unrecoverable("x")):
        plan_outcome(error, 1, 3, spy)
    plan_outcome(ValueError("x"), 3, 3, spy)
    assert asked == []
    plan_outcome(ValueError("x"), 2, 3, spy)
    assert asked == [2]


# -- retry_delay_ms and retry_cause ---------------------------------------------------

NOW = datetime(2030, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (7, 7000),
        (1.5, 1500),
        (None, 0),
        (NOW + timedelta(seconds=10), 10_000),
        (datetime(2030, 1, 1, 12, 0, 10), 10_000),  # naive: read as UTC
        (datetime(2030, 1, 1, 14, 0, 10, tzinfo=timezone(timedelta(hours=2))), 10_000),
        (NOW - timedelta(seconds=10), 0),  # an eta in the past: at once
    ],
)
def test_retry_delay(when: object, expected: int) -> None:
    assert retry_delay_ms(Retry(when=when), now=NOW) == expected


def test_a_naive_eta_is_utc_whatever_the_local_timezone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert retry_delay_ms(Retry(when=datetime(2030, 1, 1, 12, 0, 10)), now=NOW) == 10_000
    finally:
        monkeypatch.undo()
        time.tzset()


def test_retry_cause_is_the_retried_exception() -> None:
    inner = ValueError("boom")
    assert retry_cause(Retry(exc=inner, when=1)) is inner
    bare = Retry(when=1)
    assert retry_cause(bare) is bare
    plain = KeyError("k")
    assert retry_cause(plain) is plain


# -- backoff_ms -----------------------------------------------------------------------

BIG = 10**12


@pytest.mark.parametrize(
    ("attempt", "base", "expected"),
    [(0, 1000, 1000), (1, 1000, 1000), (2, 1000, 2000), (3, 1000, 4000), (5, 200, 3200)],
)
def test_backoff_without_jitter(attempt: int, base: int, expected: int) -> None:
    assert backoff_ms(attempt, base, BIG, lambda: 0.0) == expected


@pytest.mark.parametrize(
    ("attempt", "base", "expected"),
    [(0, 1000, 1250), (1, 1000, 1250), (2, 1000, 2500), (3, 1000, 5000), (4, 400, 4000)],
)
def test_backoff_with_full_jitter_is_the_documented_upper_bound(
    attempt: int, base: int, expected: int
) -> None:
    # base * 2**(n-1) * 1.25
    assert backoff_ms(attempt, base, BIG, lambda: 1.0) == expected


@pytest.mark.parametrize("attempt", [1, 2, 3, 6, 10])
@pytest.mark.parametrize("rand", [0.0, 0.1, 0.5, 0.99, 1.0])
def test_backoff_stays_within_its_bounds(attempt: int, rand: float) -> None:
    base = 1000
    low = base * 2 ** (attempt - 1)
    value = backoff_ms(attempt, base, BIG, lambda: rand)
    assert base <= low <= value <= low * 1.25


@pytest.mark.parametrize(("attempt", "rand"), [(10, 0.0), (30, 1.0), (7, 0.5)])
def test_backoff_is_capped(attempt: int, rand: float) -> None:
    assert backoff_ms(attempt, 1000, 60_000, lambda: rand) == 60_000


def test_backoff_below_the_cap_is_not_capped() -> None:
    assert backoff_ms(6, 1000, 60_000, lambda: 1.0) == 40_000


def test_a_cap_below_the_base_wins() -> None:
    assert backoff_ms(1, 1000, 300, lambda: 0.0) == 300


def test_a_zero_base_means_no_delay() -> None:
    assert backoff_ms(5, 0, BIG, lambda: 1.0) == 0


# -- a body's own retry: sent before its attempt is written, or gave up (issue 12, item 3)


@pytest.mark.parametrize(
    ("when", "sent", "expected"),
    [
        (7, NOW, 7000),  # published now: the whole countdown, as Celery waits it
        (7, NOW - timedelta(seconds=2), 5000),  # counts from the publish
        (7, NOW - timedelta(milliseconds=5), 6995),  # never ends early
        (0.2, NOW, 200),
        (7, NOW - timedelta(seconds=9), 0),  # already due
        (NOW + timedelta(seconds=10), NOW - timedelta(seconds=1), 10_000),
        (None, NOW, 0),
    ],
)
def test_retry_delay_counts_from_the_publish(when: object, sent: datetime, expected: int) -> None:
    assert retry_delay_ms(Retry(when=when), now=NOW, sent=sent) == expected


@pytest.mark.parametrize(("attempt", "max_attempts"), [(1, 3), (3, 3)])
def test_an_error_a_retry_gave_up_with_fails_with_the_retries_used(
    attempt: int, max_attempts: int
) -> None:
    plan = plan_outcome(ValueError("x"), attempt, max_attempts, backoff, gave_up=True)
    assert plan == Plan(Write.FAIL, reraise=True, note="no retry left", used_up=True)


def test_a_retry_on_the_last_attempt_fails_without_saying_the_retries_were_used() -> None:
    plan = plan_outcome(Retry(exc=ValueError("x"), when=1), 3, 3, backoff)
    assert plan == Plan(Write.FAIL, reraise=True)


def test_a_final_failure_never_raises_retry_to_celery() -> None:
    inner = ValueError("boom")
    assert final_error(Retry(exc=inner, when=1)) is inner
    bare = final_error(Retry(when=1))
    assert isinstance(bare, MaxRetriesExceededError) and "no attempt left" in str(bare)
    other = KeyError("k")
    assert final_error(other) is other


# -- Failure: a failed attempt's write, one value; after_write ------------------------


def test_a_failure_says_whether_it_is_final_and_whether_it_travels_unsaved() -> None:
    final = outcomes.Failure("E", "boom", outcomes.Failed(RuntimeError()))
    retry = outcomes.Failure("E", "boom", outcomes.Retrying(1.0, None), retry_ms=1000)
    carried_retry = outcomes.Failure(
        "E", "boom", outcomes.Retrying(1.0, None), retry_ms=1000, carry=True
    )
    assert final.final and final.carried  # a final failure is never lost
    assert not retry.final and not retry.carried  # the re-publish makes the next attempt
    assert carried_retry.carried


def test_after_write_gives_the_verdict_of_each_plan() -> None:
    error = RuntimeError("boom")
    assert outcomes.after_write(Plan(Write.COMPLETE), None, CELERY_SIGNALS, 5) == (
        outcomes.Completed(5)
    )
    retried = outcomes.after_write(Plan(Write.RETRY, delay_ms=1500), error, CELERY_SIGNALS)
    assert retried == outcomes.Retrying(1.5, error)
    failed = outcomes.after_write(Plan(Write.FAIL, reraise=True), error, CELERY_SIGNALS)
    assert failed == outcomes.Failed(error)
    ignored = Ignore()
    passed = outcomes.after_write(Plan(Write.COMPLETE, reraise=True), ignored, CELERY_SIGNALS)
    assert passed == outcomes.PassedOn(ignored)
