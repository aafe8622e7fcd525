"""The example service reads the seed's names (``DATABASE_URL``, ``REDIS_URL``,
``JOB_QUEUE_*``) and gives celery-tracked ``tracked_*`` settings; a ``CELERY_TRACKED_*``
variable wins over the seed's name."""

from __future__ import annotations

from celery_tracked import Settings
from example_project.service.bodies import BODIES
from example_project.service.celery_app import create_celery, processors
from example_project.service.config import ServiceConfig, parse_tokens, with_connect_timeout


def test_the_seed_names_become_tracked_settings() -> None:
    config = ServiceConfig.from_env(
        {
            "DATABASE_URL": "sqlite:///seed.sqlite3",
            "REDIS_URL": "memory://",
            "JOB_QUEUE_DEFAULT_ATTEMPTS": "5",
            "JOB_QUEUE_COURSE_GEN_CONCURRENCY": "4",
            "SERVICE_API_TOKENS": "t1=alice, t2=bob,broken",
        }
    )
    settings = Settings.from_conf(config.celery_settings(), environ={})
    assert settings.database_url == "sqlite:///seed.sqlite3" and settings.memory_guard
    assert (settings.default_attempts, settings.concurrency_limit) == (5, 4)
    assert config.broker_url == "memory://" and config.api_tokens == {"t1": "alice", "t2": "bob"}
    assert config.admin_token is None  # no admin route answers


def test_a_specific_name_wins_over_the_seed_name() -> None:
    config = ServiceConfig.from_env(
        {
            "DATABASE_URL": "sqlite:///seed.sqlite3",
            "CELERY_TRACKED_DATABASE_URL": "sqlite:///specific.sqlite3",
            "REDIS_URL": "redis://cache/0",
            "CELERY_TRACKED_REDIS_URL": "redis://guard/1",
            "CELERY_BROKER_URL": "redis://broker/2",
        }
    )
    assert config.database_url == "sqlite:///specific.sqlite3"
    assert (config.redis_url, config.broker_url) == ("redis://guard/1", "redis://broker/2")


def test_every_queue_of_the_api_has_a_body_and_a_processor() -> None:
    app = create_celery(ServiceConfig("memory://", "sqlite://", "memory://"))
    try:
        assert set(processors(app)) == set(BODIES)
    finally:
        app.close()
    assert parse_tokens("") == {}


def test_a_postgresql_url_gets_a_connect_timeout_unless_it_has_one() -> None:
    assert (
        with_connect_timeout("postgresql+psycopg://u:p%40ss@h:5444/x")
        == "postgresql+psycopg://u:p%40ss@h:5444/x?connect_timeout=3"
    )
    assert with_connect_timeout("postgresql://h/x?connect_timeout=9").endswith("=9")
    assert with_connect_timeout("sqlite:///a.sqlite3") == "sqlite:///a.sqlite3"
    config = ServiceConfig.from_env({"DATABASE_URL": "postgresql+psycopg://h/db"})
    assert config.database_url == "postgresql+psycopg://h/db?connect_timeout=3"
