"""Celery's retry options mean what they meant (issue 7, item 3): the one mapping of
``retry_policy.py``, applied when the task class is made, contradictions refused."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_tracked import InvalidTaskOption, TrackedTask, tracked_task
from celery_tracked.core.outcome import Write, plan_outcome
from celery_tracked.core.retry_policy import Backoff, RetryPolicy, retry_policy


def half() -> float:
    return 0.5


def body(x: int) -> int:
    return x


def policy_of(**options: Any) -> RetryPolicy:
    app = Celery("retry", broker="memory://", set_as_current=False)
    task = tracked_task(app=app, shared=False, name="t", **options)(body)
    return task._tracked_retry


def test_max_retries_is_one_attempt_more() -> None:
    assert policy_of(max_retries=2).max_attempts == 3
    assert policy_of(max_retries=0).max_attempts == 1
    assert policy_of(max_retries=2, max_attempts=3).max_attempts == 3  # agreeing: fine


def test_retry_backoff_is_our_exponential_backoff_in_seconds() -> None:
    assert policy_of(retry_backoff=True).backoff_ms == 1000
    policy = policy_of(retry_backoff=5, retry_backoff_max=30, retry_jitter=False)
    assert (policy.backoff_ms, policy.cap_ms, policy.jitter) == (5000, 30_000, False)
    delays = [policy.delay_ms(n, policy.base_ms(100), 3_600_000, half) for n in (1, 2, 3, 4)]
    assert delays == [5000, 10_000, 20_000, 30_000]
    assert policy_of(retry_backoff=False).backoff_ms is None


def test_jitter_on_by_default_and_backoff_ms_keeps_its_meaning() -> None:
    policy = policy_of(backoff_ms=100)
    assert policy.delay_ms(2, policy.base_ms(1000), 3_600_000, half) == int(200 * 1.125)


def test_default_retry_delay_is_a_fixed_delay_when_no_backoff_is_given() -> None:
    policy = policy_of(default_retry_delay=2)
    assert [policy.delay_ms(n, policy.base_ms(100), 3_600_000, half) for n in (1, 3)] == [
        2000,
        2000,
    ]
    assert policy_of().base_ms(100) == 100  # nothing declared: the settings' default


def test_autoretry_for_says_which_exceptions_are_retried() -> None:
    default = policy_of()
    assert default.retries(KeyError()) and default.retries(ConnectionError())
    only = policy_of(autoretry_for=(ConnectionError,), dont_autoretry_for=(ConnectionResetError,))
    assert only.retries(ConnectionRefusedError())
    assert not only.retries(KeyError())
    assert not only.retries(ConnectionResetError())
    assert not policy_of(autoretry_for=()).retries(ConnectionError())  # retries nothing
    assert not policy_of(dont_autoretry_for=(KeyError,)).retries(KeyError())


def test_an_exception_not_retried_fails_the_job_at_first_attempt() -> None:
    policy = policy_of(autoretry_for=(ConnectionError,))
    plan = plan_outcome(KeyError(), 1, 3, lambda n: 100, policy.retries)
    assert (plan.write, plan.reraise) == (Write.FAIL, True)
    plan = plan_outcome(ConnectionError(), 1, 3, lambda n: 100, policy.retries)
    assert (plan.write, plan.delay_ms) == (Write.RETRY, 100)


def test_a_subclass_inherits_and_overrides_the_policy() -> None:
    class Base(TrackedTask):
        max_retries = 4
        autoretry_for = (OSError,)

    class Child(Base):
        retry_backoff = 2

    assert Child._tracked_retry == RetryPolicy(max_attempts=5, backoff_ms=2000, retry_on=(OSError,))


CONTRADICTIONS = [
    ({"max_retries": 2, "max_attempts": 5}, "max_retries", "write only max_attempts=5"),
    ({"retry_backoff": 3, "backoff_ms": 100}, "retry_backoff", "write only backoff_ms=3000"),
    ({"retry_backoff": True, "default_retry_delay": 5}, "default_retry_delay", "only one"),
    ({"backoff_ms": 100, "default_retry_delay": 5}, "default_retry_delay", "only one"),
]


@pytest.mark.parametrize(("options", "name", "advice"), CONTRADICTIONS)
def test_contradictions_are_refused_at_decoration(
    options: dict[str, Any], name: str, advice: str
) -> None:
    with pytest.raises(InvalidTaskOption) as info:
        tracked_task(app=Celery("r", set_as_current=False), **options)(lambda x: x)
    assert info.value.setting == name
    assert advice in str(info.value)


def test_contradiction_in_a_task_class_is_refused() -> None:
    with pytest.raises(InvalidTaskOption, match="max_attempts=2"):

        class Contradictory(TrackedTask):
            max_retries = 5
            max_attempts = 2


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_retries", -1),
        ("max_retries", "2"),
        ("retry_backoff", "1s"),
        ("retry_backoff_max", -5),
        ("retry_jitter", "yes"),
        ("default_retry_delay", True),
        ("autoretry_for", (ConnectionError, "KeyError")),
        ("dont_autoretry_for", 7),
    ],
)
def test_bad_values_are_refused(name: str, value: Any) -> None:
    with pytest.raises(InvalidTaskOption) as info:
        retry_policy({name: value})
    assert info.value.setting == name


def test_a_workers_backoff_caps_a_task_policy_and_its_own_waits() -> None:
    backoff = Backoff(default_base_ms=1000, cap_ms=3000)
    fixed = RetryPolicy(backoff_ms=2000, exponential=False)
    assert backoff.retry_ms(fixed, 5, fixed.base_ms(1000)) == 2000
    exponential = RetryPolicy(jitter=False)
    assert [backoff.retry_ms(exponential, n, 1000) for n in (1, 2, 3)] == [1000, 2000, 3000]
    assert 1000 <= backoff.own_wait_ms() <= 1250  # the first wait, jitter up to 25 %
    assert backoff.own_wait_ms(cap_ms=600) == 600
