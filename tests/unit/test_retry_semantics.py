"""Retry semantics on conversion (issue 24, item 6): an app converted with
``base=TrackedTask`` (or ``task_cls``) keeps Celery's retry semantics by default
(``tracked_retry_semantics = "celery"``); ``@tracked_task`` keeps the library's."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_tracked import ConfigurationError, InvalidTaskOption, TrackedTask, tracked_task
from celery_tracked.core.outcomes import Write, plan_outcome
from celery_tracked.core.retry_policy import RetryPolicy
from celery_tracked.core.settings import Settings


def body(x: int) -> int:
    return x


def app_of(**conf: Any) -> Celery:
    app = Celery("semantics", broker="memory://", set_as_current=False)
    app.conf.update(**conf)  # a description reads only tracked_retry_semantics
    return app


def converted(app: Celery, **options: Any) -> RetryPolicy:
    task = app.task(base=TrackedTask, shared=False, name="conv", **options)(body)
    return task.description.retry


def plan(policy: RetryPolicy, attempt: int) -> Write:
    """What attempt ``attempt`` raising ``ValueError`` writes under ``policy``."""
    assert policy.max_attempts is not None
    return plan_outcome(
        ValueError("x"), attempt, policy.max_attempts, lambda n: 10, policy.retries
    ).write


def test_a_converted_task_keeps_celerys_semantics_by_default() -> None:
    policy = converted(app_of())
    assert policy.semantics == "celery"
    assert policy.max_attempts == 4  # Celery's max_retries = 3
    assert policy.retry_on == ()  # only self.retry (or autoretry_for) retries
    assert plan(policy, 1) is Write.FAIL
    assert (policy.backoff_ms, policy.exponential) == (180_000, False)  # default_retry_delay


def test_celerys_own_options_still_apply_under_celerys_semantics() -> None:
    policy = converted(app_of(), autoretry_for=(ValueError,), max_retries=1, retry_backoff=2)
    assert (policy.max_attempts, policy.retry_on) == (2, (ValueError,))
    assert (policy.backoff_ms, policy.exponential) == (2000, True)
    assert plan(policy, 1) is Write.RETRY
    assert plan(policy, 2) is Write.FAIL


def test_the_app_may_choose_the_librarys_semantics() -> None:
    policy = converted(app_of(tracked_retry_semantics="tracked"))
    assert policy.semantics == "tracked"
    assert policy.max_attempts is None  # tracked_default_attempts
    assert policy.retry_on is None  # every exception
    assert plan(RetryPolicy(max_attempts=3), 1) is Write.RETRY


def test_tracked_task_keeps_the_librarys_semantics_unless_it_says_otherwise() -> None:
    app = app_of()
    task = tracked_task(app=app, shared=False, name="t")(body)
    assert (task.description.retry.semantics, task.description.retry.retry_on) == ("tracked", None)
    own = tracked_task(app=app, shared=False, name="c", retry_semantics="celery")(body)
    assert own.description.retry.max_attempts == 4


def test_a_task_may_declare_its_own_semantics() -> None:
    policy = converted(app_of(tracked_retry_semantics="tracked"), retry_semantics="celery")
    assert (policy.semantics, policy.retry_on) == ("celery", ())
    with pytest.raises(InvalidTaskOption, match=r"retry_semantics.*'celery', 'tracked'"):
        tracked_task(app=app_of(), shared=False, name="bad", retry_semantics="sometimes")(body)


def test_the_setting_is_validated_and_a_misspelling_is_refused() -> None:
    conf = {"tracked_redis_url": "memory://"}
    assert Settings.from_conf(conf, {}).retry_semantics == "celery"
    env = {"CELERY_TRACKED_RETRY_SEMANTICS": " Tracked "}
    assert Settings.from_conf(conf, env).retry_semantics == "tracked"
    with pytest.raises(ConfigurationError, match="must be one of celery, tracked"):
        Settings.from_conf({**conf, "tracked_retry_semantics": "always"}, {})
    with pytest.raises(ConfigurationError, match="did you mean 'tracked_retry_semantics'"):
        Settings.from_conf({"tracked_retry_semantic": "celery"}, {})
