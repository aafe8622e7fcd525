"""``celery_tracked.contrib.django.database_url``: Django's ``DATABASES`` entry → a URL."""

from __future__ import annotations

import pytest
from sqlalchemy import make_url

from celery_tracked import ConfigurationError, Settings
from celery_tracked.contrib.django import database_url

PG = "django.db.backends.postgresql"


def test_postgresql_with_every_part_and_a_password_that_needs_escaping() -> None:
    entry = {
        "ENGINE": PG,
        "NAME": "shop",
        "USER": "app",
        "PASSWORD": "p@ss/w:rd",
        "HOST": "db.internal",
        "PORT": "6432",
        "OPTIONS": {"sslmode": "require"},  # not carried over (documented)
    }
    url = database_url(entry)
    assert url == "postgresql+psycopg://app:p%40ss%2Fw%3Ard@db.internal:6432/shop"
    parsed = make_url(url)
    assert (parsed.password, parsed.port, parsed.query) == ("p@ss/w:rd", 6432, {})
    settings = Settings.from_conf(
        {"tracked_database_url": url, "tracked_redis_url": "memory://"}, environ={}
    )
    assert "p@ss" not in settings.safe_database_url


def test_djangos_empty_strings_mean_not_set() -> None:
    entry = {"ENGINE": PG, "NAME": "shop", "USER": "", "PASSWORD": "", "HOST": "", "PORT": ""}
    assert database_url(entry) == "postgresql+psycopg:///shop"  # libpq's defaults (socket)
    assert database_url({"ENGINE": PG, "NAME": "shop", "PORT": 5432}).endswith(":5432/shop")


def test_mysql_sqlite_and_an_explicit_driver() -> None:
    mysql = {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "USER": "root"}
    assert database_url(mysql) == "mysql+pymysql://root@/shop"
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/app/db.sqlite3"}
    assert database_url(sqlite) == "sqlite:////srv/app/db.sqlite3"
    entry = {"ENGINE": PG, "NAME": "shop", "HOST": "h"}
    assert database_url(entry, driver="postgresql+psycopg2") == "postgresql+psycopg2://h/shop"


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"ENGINE": "django.db.backends.oracle", "NAME": "x"}, "no SQLAlchemy driver"),
        ({"ENGINE": PG, "NAME": ""}, "no NAME"),
        ({"NAME": "x"}, "no SQLAlchemy driver"),
    ],
)
def test_what_it_cannot_map_is_a_configuration_error(entry: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words) as info:
        database_url(entry)
    assert info.value.setting == "tracked_database_url"
