"""The service's configuration, read from the environment like a deployment.

The seed's names are mapped onto celery-tracked's settings (a ``CELERY_TRACKED_*``
variable wins over the seed's name, see docs/configuration.md "A project's own names"):

=====================================  ============================
environment variable                   setting
=====================================  ============================
``DATABASE_URL``                       ``tracked_database_url`` (and the example's tables)
``REDIS_URL``                          ``tracked_redis_url`` (and the per-caller limit)
``JOB_QUEUE_DEFAULT_ATTEMPTS``         ``tracked_default_attempts``
``JOB_QUEUE_DEFAULT_BACKOFF_MS``       ``tracked_default_backoff_ms``
``JOB_QUEUE_COURSE_GEN_LIMITER_MS``    ``tracked_rate_limit_ms``
``JOB_QUEUE_COURSE_GEN_CONCURRENCY``   ``tracked_concurrency_limit``
``CELERY_BROKER_URL``                  the broker (default: ``REDIS_URL``)
=====================================  ============================

A PostgreSQL ``DATABASE_URL`` without ``connect_timeout`` gets ``connect_timeout=3``
(:func:`with_connect_timeout`); the broker has 2 s to connect or answer a command
(``celery_app.py``): a dependency that never answers is a 503, not a hung request.

The service's own: ``SERVICE_API_TOKENS`` (``token=user_id`` pairs separated by commas:
a caller's bearer token and the user id its jobs are owned by), ``SERVICE_ADMIN_TOKEN``
(the admin routes' bearer token; unset: no admin routes answer),
``SERVICE_RATE_LIMIT_PER_MINUTE`` (jobs a caller may submit per minute, default 60),
``SMTP_HOST``/``SMTP_PORT``/``MAIL_FROM`` (where the email processor sends).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url

from example_project.courses.settings import seed_settings

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
DEFAULT_DATABASE = "sqlite:///service.sqlite3"
#: seconds PostgreSQL has to accept a connection (``connect_timeout``, unless the URL has one)
DATABASE_CONNECT_TIMEOUT = 3


def with_connect_timeout(url: str) -> str:
    """A PostgreSQL URL with ``connect_timeout`` (if it has none): a database that accepts
    the connection and never answers must not hang a request; other URLs as they are."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql" or "connect_timeout" in parsed.query:
        return url
    return parsed.update_query_dict(
        {"connect_timeout": str(DATABASE_CONNECT_TIMEOUT)}
    ).render_as_string(hide_password=False)


def parse_tokens(text: str) -> dict[str, str]:
    """``"tok1=alice,tok2=bob"`` → ``{"tok1": "alice", "tok2": "bob"}``."""
    pairs = (item.strip().partition("=") for item in text.split(","))
    return {token: user for token, _, user in pairs if token and user}


@dataclass(frozen=True)
class ServiceConfig:
    """Everything the API and the workers need; :meth:`from_env` reads it."""

    broker_url: str
    database_url: str
    redis_url: str
    api_tokens: Mapping[str, str] = field(default_factory=dict, repr=False)
    admin_token: str | None = field(default=None, repr=False)
    rate_limit_per_minute: int = 60
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 25
    mail_from: str = "service@example.com"
    #: more ``tracked_*`` settings (the seed's ``JOB_QUEUE_*`` names)
    tracked: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "database_url", with_connect_timeout(self.database_url))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServiceConfig:
        env = os.environ if environ is None else environ
        redis_url = env.get("CELERY_TRACKED_REDIS_URL") or env.get("REDIS_URL") or DEFAULT_REDIS
        database_url = (
            env.get("CELERY_TRACKED_DATABASE_URL") or env.get("DATABASE_URL") or DEFAULT_DATABASE
        )
        tracked = {
            k: v for k, v in seed_settings(env).items() if k != "tracked_redis_url"
        }  # the Redis URL is chosen above
        return cls(
            broker_url=env.get("CELERY_BROKER_URL") or env.get("REDIS_URL") or DEFAULT_REDIS,
            database_url=database_url,
            redis_url=redis_url,
            api_tokens=parse_tokens(env.get("SERVICE_API_TOKENS", "")),
            admin_token=env.get("SERVICE_ADMIN_TOKEN") or None,
            rate_limit_per_minute=int(env.get("SERVICE_RATE_LIMIT_PER_MINUTE", "60")),
            smtp_host=env.get("SMTP_HOST", "127.0.0.1"),
            smtp_port=int(env.get("SMTP_PORT", "25")),
            mail_from=env.get("MAIL_FROM", "service@example.com"),
            tracked=tracked,
        )

    def celery_settings(self) -> dict[str, Any]:
        """The Celery app's ``tracked_*`` settings."""
        return {
            **self.tracked,
            "tracked_database_url": self.database_url,
            "tracked_redis_url": self.redis_url,
        }
