from __future__ import annotations

from dataclasses import fields

import pytest

from celery_tracked import ConfigurationError, Settings

from .test_redact_and_errors import KEYS as DOCUMENTED_REDACT_KEYS


def test_defaults_with_explicit_memory_guard() -> None:
    s = Settings.from_conf({"tracked_redis_url": "memory://"}, environ={})
    assert s.memory_guard
    # the defaults documented in docs/configuration.md, pinned literally
    assert s.database_url == "sqlite:///celery_tracked.sqlite3"
    assert s.default_attempts == 3
    assert s.default_backoff_ms == 1000
    assert s.max_backoff_ms == 3_600_000
    assert s.max_payload_bytes == 65536
    assert s.lease_seconds == 60
    assert s.guard_ttl_seconds == 86_400
    assert s.key_prefix == "celery_tracked"
    assert s.check_redis_eviction is True
    assert s.redact_keys == DOCUMENTED_REDACT_KEYS
    assert (s.reaper_interval_seconds, s.reaper_processing_seconds) == (60, 60)
    assert (s.reaper_retrying_seconds, s.reaper_pending_seconds) == (300, 600)
    assert s.reaper_max_rescues == 5


def test_no_silent_fallback_to_the_in_process_guard() -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_conf({}, environ={})
    assert info.value.setting == "tracked_redis_url"
    assert "memory://" in str(info.value)


def test_environment_fallbacks() -> None:
    env = {
        "CELERY_TRACKED_DATABASE_URL": "postgresql+psycopg://u:pw@db/x",
        "REDIS_URL": "redis://cache:6379/1",
        "JOB_QUEUE_DEFAULT_ATTEMPTS": "5",
        "JOB_QUEUE_DEFAULT_BACKOFF_MS": "5000",
    }
    s = Settings.from_conf({}, environ=env)
    assert s.database_url == "postgresql+psycopg://u:pw@db/x"
    assert s.redis_url == "redis://cache:6379/1"
    assert (s.default_attempts, s.default_backoff_ms) == (5, 5000)


def test_app_conf_wins_over_environment() -> None:
    s = Settings.from_conf(
        {"tracked_redis_url": "memory://", "tracked_default_attempts": 7},
        environ={"REDIS_URL": "redis://other/0", "JOB_QUEUE_DEFAULT_ATTEMPTS": "2"},
    )
    assert s.memory_guard and s.default_attempts == 7


@pytest.mark.parametrize(
    ("conf", "setting"),
    [
        ({"tracked_default_attempts": 0}, "tracked_default_attempts"),
        ({"tracked_default_attempts": "many"}, "tracked_default_attempts"),
        ({"tracked_default_backoff_ms": -1}, "tracked_default_backoff_ms"),
        ({"tracked_max_payload_bytes": True}, "tracked_max_payload_bytes"),
        ({"tracked_lease_seconds": 0}, "tracked_lease_seconds"),
        ({"tracked_database_url": "not a url"}, "tracked_database_url"),
        ({"tracked_redis_url": "http://x"}, "tracked_redis_url"),
    ],
)
def test_bad_setting_is_named(conf: dict[str, object], setting: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_conf({"tracked_redis_url": "memory://", **conf}, environ={})
    assert info.value.setting == setting
    assert setting in str(info.value)


def test_bad_environment_value_names_the_setting_and_the_variable() -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_conf({"tracked_redis_url": "memory://"}, {"JOB_QUEUE_DEFAULT_ATTEMPTS": "x"})
    assert info.value.setting == "tracked_default_attempts"
    assert "JOB_QUEUE_DEFAULT_ATTEMPTS" in str(info.value)


def test_credentials_never_appear_in_errors() -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_conf({"tracked_redis_url": "http://user:hunter2@host/0"}, environ={})
    assert "hunter2" not in str(info.value)


def test_redact_keys_from_a_comma_list() -> None:
    s = Settings.from_conf(
        {"tracked_redis_url": "memory://", "tracked_redact_keys": "Password, pin"}, environ={}
    )
    assert s.redact_keys == ("password", "pin")


def test_the_database_pooler_setting() -> None:
    base = {"tracked_redis_url": "memory://"}
    assert Settings.from_conf(base, environ={}).database_pooler == "none"
    env = {"CELERY_TRACKED_DATABASE_POOLER": "PgBouncer"}
    assert Settings.from_conf(base, environ=env).database_pooler == "pgbouncer"
    with pytest.raises(ConfigurationError, match="tracked_database_pooler"):
        Settings.from_conf({**base, "tracked_database_pooler": "pgpool"}, environ={})


def test_specific_names_win_over_the_seed_aliases_and_app_conf_over_both() -> None:
    env = {
        "REDIS_URL": "redis://cache/0",
        "CELERY_TRACKED_REDIS_URL": "redis://guard/1",
        "JOB_QUEUE_DEFAULT_ATTEMPTS": "2",
        "CELERY_TRACKED_DEFAULT_ATTEMPTS": "4",
    }
    s = Settings.from_conf({}, environ=env)
    assert (s.redis_url, s.default_attempts) == ("redis://guard/1", 4)
    conf = {"tracked_redis_url": "redis://conf/2", "tracked_default_attempts": 6}
    s = Settings.from_conf(conf, environ=env)
    assert (s.redis_url, s.default_attempts) == ("redis://conf/2", 6)


def test_every_setting_has_its_celery_tracked_environment_name() -> None:
    values = {
        "database_url": "sqlite:///x.db",
        "database_pooler": "pgbouncer",
        "redis_url": "redis://h/3",
        "default_attempts": "9",
        "default_backoff_ms": "7",
        "max_backoff_ms": "8",
        "max_payload_bytes": "99",
        "redact_keys": "pin",
        "lease_seconds": "5",
        "guard_ttl_seconds": "11",
        "key_prefix": "pfx",
        "check_redis_eviction": "false",
        "relay_grace_seconds": "12",
        "relay_interval_seconds": "13",
        "progress_interval_ms": "14",
        "log_lines_per_job": "15",
        "rate_limit_ms": "16",
        "concurrency_limit": "17",
        "metrics": "true",
        "reaper_interval_seconds": "18",
        "reaper_processing_seconds": "19",
        "reaper_retrying_seconds": "20",
        "reaper_pending_seconds": "21",
        "reaper_max_rescues": "22",
        "cleanup_schedule": "*/5 * * * *",
        "retention_completed_days": "1.5",
        "retention_failed_days": "2",
        "retention_keep_newest": "3",
        "cleanup_batch_size": "100",
    }
    assert set(values) == {f.name for f in fields(Settings)}
    s = Settings.from_conf(
        {}, environ={f"CELERY_TRACKED_{k.upper()}": v for k, v in values.items()}
    )
    for name in values:
        assert getattr(s, name) != getattr(Settings(), name), name


def test_the_database_url_alone_needs_no_redis_setting() -> None:
    env = {"CELERY_TRACKED_DATABASE_URL": "sqlite:///env.db"}
    assert Settings.database_url_from_conf({}, environ=env) == "sqlite:///env.db"
    conf = {"tracked_database_url": "sqlite:///conf.db"}
    assert Settings.database_url_from_conf(conf, environ=env) == "sqlite:///conf.db"
    assert Settings.database_url_from_conf({}, environ={}) == Settings().database_url
    with pytest.raises(ConfigurationError) as info:
        Settings.database_url_from_conf({"tracked_database_url": "not a url"}, environ={})
    assert info.value.setting == "tracked_database_url"


def test_seed_000s_course_generation_settings_are_the_limits_defaults() -> None:
    """``JOB_QUEUE_COURSE_GEN_LIMITER_MS`` and ``JOB_QUEUE_COURSE_GEN_CONCURRENCY`` (seed
    000) are the interval of a limiter named without one and the limit of a concurrency
    key declared without one; the specific names win over them."""
    base = {"tracked_redis_url": "memory://"}
    default = Settings.from_conf(base, environ={})
    assert (default.rate_limit_ms, default.concurrency_limit) == (2000, 2)
    seed = {"JOB_QUEUE_COURSE_GEN_LIMITER_MS": "8000", "JOB_QUEUE_COURSE_GEN_CONCURRENCY": "3"}
    s = Settings.from_conf(base, environ=seed)
    assert (s.rate_limit_ms, s.concurrency_limit) == (8000, 3)
    specific = {**seed, "CELERY_TRACKED_RATE_LIMIT_MS": "500"}
    assert Settings.from_conf(base, environ=specific).rate_limit_ms == 500
    conf = {**base, "tracked_concurrency_limit": 1}
    assert Settings.from_conf(conf, environ=seed).concurrency_limit == 1
    with pytest.raises(ConfigurationError, match="tracked_rate_limit_ms"):
        Settings.from_conf(base, environ={"JOB_QUEUE_COURSE_GEN_LIMITER_MS": "0"})
