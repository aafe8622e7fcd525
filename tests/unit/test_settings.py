from __future__ import annotations

import logging
import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from celery_tracked import ConfigurationError, Settings
from celery_tracked.core.conversions import BOUNDS

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
        "CELERY_TRACKED_REDIS_URL": "redis://cache:6379/1",
        "CELERY_TRACKED_DEFAULT_ATTEMPTS": "5",
        "CELERY_TRACKED_DEFAULT_BACKOFF_MS": "5000",
    }
    s = Settings.from_conf({}, environ=env)
    assert s.database_url == "postgresql+psycopg://u:pw@db/x"
    assert s.redis_url == "redis://cache:6379/1"
    assert (s.default_attempts, s.default_backoff_ms) == (5, 5000)


def test_app_conf_wins_over_environment() -> None:
    s = Settings.from_conf(
        {"tracked_redis_url": "memory://", "tracked_default_attempts": 7},
        environ={
            "CELERY_TRACKED_REDIS_URL": "redis://other/0",
            "CELERY_TRACKED_DEFAULT_ATTEMPTS": "2",
        },
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
        Settings.from_conf(
            {"tracked_redis_url": "memory://"}, {"CELERY_TRACKED_DEFAULT_ATTEMPTS": "x"}
        )
    assert info.value.setting == "tracked_default_attempts"
    assert "CELERY_TRACKED_DEFAULT_ATTEMPTS" in str(info.value)


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


def test_the_library_reads_no_other_projects_names_and_app_conf_wins() -> None:
    """Issue 14 item 6: the seed's ``REDIS_URL``/``JOB_QUEUE_*`` are the example's to map
    (``example_project/courses/settings.py``; tests/unit/test_example_settings.py)."""
    seed = {"REDIS_URL": "redis://cache/0", "JOB_QUEUE_DEFAULT_ATTEMPTS": "2"}
    with pytest.raises(ConfigurationError) as info:
        Settings.from_conf({}, environ=seed)
    assert info.value.setting == "tracked_redis_url"
    env = {**seed, "CELERY_TRACKED_REDIS_URL": "redis://guard/1"}
    s = Settings.from_conf({}, environ={**env, "CELERY_TRACKED_DEFAULT_ATTEMPTS": "4"})
    assert (s.redis_url, s.default_attempts) == ("redis://guard/1", 4)
    assert Settings.from_conf({}, environ=env).default_attempts == 3
    conf = {"tracked_redis_url": "redis://conf/2", "tracked_default_attempts": 6}
    s = Settings.from_conf(conf, environ={**env, "CELERY_TRACKED_DEFAULT_ATTEMPTS": "4"})
    assert (s.redis_url, s.default_attempts) == ("redis://conf/2", 6)


def test_every_setting_has_its_celery_tracked_environment_name() -> None:
    values = {
        "database_url": "sqlite:///x.db",
        "database_pooler": "pgbouncer",
        "redis_url": "redis://h/3",
        "retry_semantics": "tracked",
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
        "schedule_horizon_seconds": "600",
        "schedule_interval_seconds": "60",
        "circuit_interval_seconds": "7",
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
        "secret_key": "A" * 43 + "=",  # a Fernet key's shape: 32 bytes, url-safe base64
    }
    assert set(values) | {"redaction"} == {f.name for f in fields(Settings)}
    s = Settings.from_conf(
        {}, environ={f"CELERY_TRACKED_{k.upper()}": v for k, v in values.items()}
    )
    for name in values:
        assert getattr(s, name) != getattr(Settings(), name), name
    off = {"CELERY_TRACKED_REDACTION": "false", "CELERY_TRACKED_REDIS_URL": "redis://h/3"}
    assert Settings.from_conf({}, environ=off).redaction is False


def test_the_database_url_alone_needs_no_redis_setting() -> None:
    env = {"CELERY_TRACKED_DATABASE_URL": "sqlite:///env.db"}
    assert Settings.database_url_from_conf({}, environ=env) == "sqlite:///env.db"
    conf = {"tracked_database_url": "sqlite:///conf.db"}
    assert Settings.database_url_from_conf(conf, environ=env) == "sqlite:///conf.db"
    assert Settings.database_url_from_conf({}, environ={}) == Settings().database_url
    with pytest.raises(ConfigurationError) as info:
        Settings.database_url_from_conf({"tracked_database_url": "not a url"}, environ={})
    assert info.value.setting == "tracked_database_url"


def test_the_limits_defaults() -> None:
    """``tracked_rate_limit_ms`` and ``tracked_concurrency_limit`` are the interval of a
    limiter named without one and the limit of a concurrency key declared without one
    (seed 000's names for them: tests/unit/test_example_settings.py)."""
    base = {"tracked_redis_url": "memory://"}
    default = Settings.from_conf(base, environ={})
    assert (default.rate_limit_ms, default.concurrency_limit) == (2000, 2)
    given = {"CELERY_TRACKED_RATE_LIMIT_MS": "8000", "CELERY_TRACKED_CONCURRENCY_LIMIT": "3"}
    s = Settings.from_conf(base, environ=given)
    assert (s.rate_limit_ms, s.concurrency_limit) == (8000, 3)
    conf = {**base, "tracked_concurrency_limit": 1}
    assert Settings.from_conf(conf, environ=given).concurrency_limit == 1
    with pytest.raises(ConfigurationError, match="tracked_rate_limit_ms"):
        Settings.from_conf(base, environ={"CELERY_TRACKED_RATE_LIMIT_MS": "0"})


# -- issue 12 item 10: every number has a range; redaction is turned off explicitly ------

BASE = {"tracked_redis_url": "memory://"}
NUMERIC = sorted(BOUNDS)
INTEGERS = {f.name for f in fields(Settings) if f.type == "int"}


def test_every_numeric_setting_has_a_range() -> None:
    numeric = {f.name for f in fields(Settings) if f.type in ("int", "float")}
    assert numeric == set(BOUNDS)


#: Settings checked against each other: the partner each end of the range is given with.
PARTNERS = {
    "schedule_horizon_seconds": {"tracked_schedule_interval_seconds": 0},
    "schedule_interval_seconds": {"tracked_schedule_horizon_seconds": 7 * 86400},
}


@pytest.mark.parametrize("name", NUMERIC)
def test_the_ends_of_each_range_are_accepted(name: str) -> None:
    bound, base = BOUNDS[name], {**BASE, **PARTNERS.get(name, {})}
    for value in (bound.low, bound.high):
        value = int(value) if name in INTEGERS else value
        assert getattr(Settings.from_conf({**base, f"tracked_{name}": value}, {}), name) == value
        env = {f"CELERY_TRACKED_{name.upper()}": str(value)}
        assert getattr(Settings.from_conf(base, env), name) == value


def test_the_scheduler_pass_runs_well_within_the_horizon() -> None:
    conf = {**BASE, "tracked_schedule_horizon_seconds": 60, "tracked_schedule_interval_seconds": 31}
    with pytest.raises(ConfigurationError, match="tracked_schedule_interval_seconds"):
        Settings.from_conf(conf, {})
    conf["tracked_schedule_interval_seconds"] = 30
    assert Settings.from_conf(conf, {}).schedule_interval_seconds == 30


def _outside(name: str) -> list[Any]:
    bound, step = BOUNDS[name], 1 if name in INTEGERS else 0.001
    low = [] if bound.low - step == 0 and bound.zero else [bound.low - step]
    return [*low, bound.high + step, -1, math.nan, math.inf, -math.inf, True, 10**400, "nan"]


@pytest.mark.parametrize("name", NUMERIC)
def test_a_value_outside_its_range_is_refused_naming_the_setting_and_the_range(
    name: str,
) -> None:
    bound = BOUNDS[name]
    for value in _outside(name):
        with pytest.raises(ConfigurationError) as info:
            Settings.from_conf({**BASE, f"tracked_{name}": value}, environ={})
        assert info.value.setting == f"tracked_{name}", value
        high = str(int(bound.high)) if float(bound.high).is_integer() else str(bound.high)
        assert f"to {high}" in str(info.value) and len(str(info.value)) < 300


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("tracked_lease_seconds", 1e12),  # killed the lease-renewal thread (OverflowError)
        ("tracked_progress_interval_ms", 1e20),  # killed the progress thread
        ("tracked_relay_interval_seconds", 0.001),  # a Beat entry a thousand times a second
        ("tracked_relay_interval_seconds", 0.5),
    ],
)
def test_the_values_issue_12_found_accepted_are_refused(setting: str, value: float) -> None:
    with pytest.raises(ConfigurationError, match=setting) as info:
        Settings.from_conf({**BASE, setting: value}, environ={})
    assert info.value.setting == setting


def test_zero_still_means_no_beat_entry() -> None:
    conf = {**BASE, "tracked_relay_interval_seconds": 0}
    assert Settings.from_conf(conf, environ={}).relay_interval_seconds == 0


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def test_the_documented_ranges_are_the_codes() -> None:
    """docs/configuration.md's table of ranges is ``settings.BOUNDS``, row by row."""
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    section = page.split("\n## Ranges\n")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `tracked_(\w+)` \| ([^|]+) \| ([^|]+) \|", section, re.M)
    ranges = {name: (low.strip(), high.strip()) for name, low, high in rows}
    assert set(ranges) == set(BOUNDS)
    for name, bound in BOUNDS.items():
        low = _plain(bound.low) + (f" (or 0: {bound.zero})" if bound.zero else "")
        assert ranges[name] == (low, _plain(bound.high)), name


@pytest.mark.parametrize("keys", [[], (), "", " , ", ["", " "]])
def test_an_empty_redact_keys_is_refused_and_points_at_the_opt_out(keys: Any) -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_conf({**BASE, "tracked_redact_keys": keys}, environ={})
    assert info.value.setting == "tracked_redact_keys"
    assert "tracked_redaction = False" in str(info.value)


def test_an_empty_redact_keys_from_the_environment_is_refused_too() -> None:
    with pytest.raises(ConfigurationError, match="tracked_redaction = False"):
        Settings.from_conf(BASE, environ={"CELERY_TRACKED_REDACT_KEYS": " , "})


def test_redaction_is_turned_off_explicitly_with_a_warning_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from celery_tracked.core import settings as module

    module._warn_redaction_off.cache_clear()
    with caplog.at_level(logging.WARNING, logger="celery_tracked"):
        for conf in ({"tracked_redaction": False}, {"tracked_redaction": "off"}):
            s = Settings.from_conf({**BASE, **conf}, environ={})
            assert (s.redaction, s.redact_keys) == (False, ())
        empty = {"tracked_redaction": False, "tracked_redact_keys": []}
        assert Settings.from_conf({**BASE, **empty}, environ={}).redact_keys == ()
    warned = [r for r in caplog.records if "tracked_redaction is False" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert Settings.from_conf(BASE, environ={}).redaction is True


def test_redaction_off_with_redact_keys_given_is_a_contradiction() -> None:
    conf = {**BASE, "tracked_redaction": False, "tracked_redact_keys": ["pin"]}
    with pytest.raises(ConfigurationError) as info:
        Settings.from_conf(conf, environ={})
    assert info.value.setting == "tracked_redaction" and "tracked_redact_keys" in str(info.value)
