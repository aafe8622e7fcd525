"""The example maps the seed's own names onto celery-tracked's settings (issue 14 item 6:
the library reads only ``tracked_*`` and ``CELERY_TRACKED_*``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from celery_tracked import ConfigurationError, Settings
from example_project.courses.settings import seed_settings


def read(environ: Mapping[str, str], conf: Mapping[str, Any] | None = None) -> Settings:
    """The settings of an app configured as the example's: its ``conf``, the seed's names
    mapped onto it, the environment."""
    return Settings.from_conf({**seed_settings(environ), **(conf or {})}, environ=environ)


@pytest.mark.parametrize(
    ("seed_name", "value", "setting", "read_back"),
    [
        ("REDIS_URL", "redis://cache:6379/1", "redis_url", "redis://cache:6379/1"),
        ("JOB_QUEUE_DEFAULT_ATTEMPTS", "5", "default_attempts", 5),
        ("JOB_QUEUE_DEFAULT_BACKOFF_MS", "5000", "default_backoff_ms", 5000),
    ],
)
def test_the_seed_names_configure_the_example(
    seed_name: str, value: str, setting: str, read_back: object
) -> None:
    env = {"CELERY_TRACKED_REDIS_URL": "memory://", seed_name: value}
    if seed_name == "REDIS_URL":
        del env["CELERY_TRACKED_REDIS_URL"]
    assert getattr(read(env), setting) == read_back


def test_app_conf_wins_over_the_seed_names() -> None:
    env = {"REDIS_URL": "redis://other/0", "JOB_QUEUE_DEFAULT_ATTEMPTS": "2"}
    s = read(env, {"tracked_redis_url": "memory://", "tracked_default_attempts": 7})
    assert s.memory_guard and s.default_attempts == 7


def test_specific_names_win_over_the_seed_names_and_app_conf_over_both() -> None:
    """DESIGN.md: app.conf > ``CELERY_TRACKED_*`` > the seed's names (mapped here)."""
    seed = {"REDIS_URL": "redis://cache/0", "JOB_QUEUE_DEFAULT_ATTEMPTS": "2"}
    specific = {
        "CELERY_TRACKED_REDIS_URL": "redis://guard/1",
        "CELERY_TRACKED_DEFAULT_ATTEMPTS": "4",
    }
    env = {**seed, **specific}
    s = read(env)
    assert (s.redis_url, s.default_attempts) == ("redis://guard/1", 4)
    s = read(env, {"tracked_redis_url": "redis://conf/2", "tracked_default_attempts": 6})
    assert (s.redis_url, s.default_attempts) == ("redis://conf/2", 6)


def test_a_bad_seed_value_names_the_setting() -> None:
    with pytest.raises(ConfigurationError) as info:
        read({"REDIS_URL": "memory://", "JOB_QUEUE_DEFAULT_ATTEMPTS": "x"})
    assert info.value.setting == "tracked_default_attempts"


def test_seed_000s_course_generation_settings_are_the_limits_defaults() -> None:
    """``JOB_QUEUE_COURSE_GEN_LIMITER_MS`` and ``JOB_QUEUE_COURSE_GEN_CONCURRENCY`` (seed
    000) are the interval of a limiter named without one and the limit of a concurrency
    key declared without one; the specific names win over them."""
    base = {"tracked_redis_url": "memory://"}
    seed = {"JOB_QUEUE_COURSE_GEN_LIMITER_MS": "8000", "JOB_QUEUE_COURSE_GEN_CONCURRENCY": "3"}
    s = read(seed, base)
    assert (s.rate_limit_ms, s.concurrency_limit) == (8000, 3)
    specific = {**seed, "CELERY_TRACKED_RATE_LIMIT_MS": "500"}
    assert read(specific, base).rate_limit_ms == 500
    assert read(seed, {**base, "tracked_concurrency_limit": 1}).concurrency_limit == 1
    with pytest.raises(ConfigurationError, match="tracked_rate_limit_ms"):
        read({"JOB_QUEUE_COURSE_GEN_LIMITER_MS": "0"}, base)


def test_empty_seed_values_are_not_given() -> None:
    assert seed_settings({"REDIS_URL": "", "JOB_QUEUE_DEFAULT_ATTEMPTS": "3"}) == {
        "tracked_default_attempts": "3"
    }
