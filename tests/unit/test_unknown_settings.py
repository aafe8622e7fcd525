"""Issue 22, item 5: a misspelled ``tracked_*`` setting is refused, never silently replaced
by its default; the refusal names the closest known setting."""

from __future__ import annotations

import dataclasses

import pytest
from celery import Celery

from celery_tracked.adapter.celery_state import settings_for
from celery_tracked.core.errors import ConfigurationError
from celery_tracked.core.settings import Settings, known_names

BASE = {"tracked_redis_url": "memory://", "tracked_database_url": "memory://"}


def test_misspelled_conf_name_is_refused_with_the_closest_name() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_conf({**BASE, "tracked_db_url": "sqlite:///x.sqlite3"}, environ={})
    assert caught.value.setting == "tracked_db_url"
    assert "did you mean 'tracked_database_url'?" in str(caught.value)


def test_misspelled_environment_variable_is_refused_with_the_closest_name() -> None:
    environ = {"CELERY_TRACKED_LEASE_SECOND": "5", "CELERY_TRACKED_REDIS_URL": "memory://"}
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_conf({"tracked_database_url": "memory://"}, environ=environ)
    assert caught.value.setting == "CELERY_TRACKED_LEASE_SECOND"
    assert "did you mean 'CELERY_TRACKED_LEASE_SECONDS'?" in str(caught.value)


def test_a_name_far_from_every_setting_points_to_the_list() -> None:
    with pytest.raises(ConfigurationError, match=r"docs/configuration\.md"):
        Settings.from_conf({**BASE, "tracked_zzzzzzzzzz": 1}, environ={})


def test_database_url_alone_refuses_unknown_names_too() -> None:
    """``tracked migrate`` reads only the database URL: a misspelling is refused there too
    (else it would migrate the default SQLite file of the current directory)."""
    with pytest.raises(ConfigurationError, match="tracked_database_url"):
        Settings.database_url_from_conf({"tracked_databse_url": "sqlite:///x"}, environ={})


def test_known_names_are_the_settings_fields() -> None:
    """A field added to ``Settings`` (other branches add settings) is known at once."""
    assert set(known_names()) == {f.name for f in dataclasses.fields(Settings)}
    for name in known_names():
        if name not in ("redis_url", "database_url"):
            continue
        Settings.from_conf({**BASE, f"tracked_{name}": BASE[f"tracked_{name}"]}, environ={})


def test_celery_app_conf_with_a_namespace() -> None:
    """Django's ``config_from_object(..., namespace="CELERY")``: ``CELERY_TRACKED_X`` keys;
    a known one is read, a misspelled one refused; other Celery settings are not ours."""

    class DjangoSettings:
        CELERY_TRACKED_DATABASE_URL = "memory://"
        CELERY_TRACKED_REDIS_URL = "memory://"
        CELERY_TASK_ALWAYS_EAGER = False
        DEBUG = False

    app = Celery("ns", set_as_current=False)
    app.config_from_object(DjangoSettings, namespace="CELERY")
    assert settings_for(app, environ={}).database_url == "memory://"

    class Misspelled(DjangoSettings):
        CELERY_TRACKED_LEASE_SECS = 5

    app = Celery("ns2", set_as_current=False)
    app.config_from_object(Misspelled, namespace="CELERY")
    with pytest.raises(ConfigurationError, match="did you mean 'CELERY_TRACKED_LEASE_SECONDS'"):
        settings_for(app, environ={})


def test_plain_celery_app_conf_is_scanned() -> None:
    app = Celery("plain", set_as_current=False)
    app.conf.update(BASE, tracked_lease_seconds=5, task_default_queue="q")
    assert settings_for(app, environ={}).lease_seconds == 5
    app.conf.tracked_leas_seconds = 7
    with pytest.raises(ConfigurationError, match="did you mean 'tracked_lease_seconds'"):
        settings_for(app, environ={})


@pytest.mark.parametrize("scheme", ["postgres", "POSTGRES", "postgres+psycopg"])
def test_postgres_scheme_hints_postgresql_psycopg(scheme: str) -> None:
    """Issue 22, item 12: ``postgres://`` (Heroku's spelling) is a ConfigurationError
    naming the fix, not SQLAlchemy's raw "Can't load plugin" error; the password masked."""
    given = f"{scheme}://user:hunter2@db.example/app"
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_conf({**BASE, "tracked_database_url": given}, environ={})
    assert "postgresql+psycopg://" in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("key", ["TRACKED_DATABASE_URL", "Tracked_Database_Url"])
def test_an_upper_case_name_in_app_conf_is_refused_not_ignored(key: str) -> None:
    """Trial of issue 22, F5: Celery reads only ``tracked_database_url`` from ``app.conf``;
    ``TRACKED_DATABASE_URL`` was silently ignored (the default SQLite file was used)."""
    app = Celery("upper", set_as_current=False)
    app.conf.update(tracked_redis_url="memory://")
    app.conf[key] = "memory://"
    with pytest.raises(ConfigurationError, match="did you mean 'tracked_database_url'") as caught:
        settings_for(app, environ={})
    assert caught.value.setting == key


def test_a_misspelled_namespaced_name_gets_the_namespaced_spelling() -> None:
    class Misspelled:
        CELERY_TRACKED_DATABSE_URL = "memory://"
        CELERY_TRACKED_REDIS_URL = "memory://"

    app = Celery("ns3", set_as_current=False)
    app.config_from_object(Misspelled, namespace="CELERY")
    with pytest.raises(ConfigurationError, match="did you mean 'CELERY_TRACKED_DATABASE_URL'"):
        settings_for(app, environ={})
