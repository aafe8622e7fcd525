"""One frozen settings object, read from ``app.conf`` with environment fallbacks.

Precedence: ``app.conf.tracked_*`` first, then the environment variable, then the
default. Values are validated once, in :meth:`Settings.from_conf`; a bad value raises
:class:`~celery_tracked.errors.ConfigurationError` naming the setting.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from .errors import ConfigurationError, mask_url

MEMORY_URL = "memory://"

DEFAULT_REDACT_KEYS: tuple[str, ...] = (
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "auth",
    "credential",
    "private_key",
    "cookie",
    "session",
    "card_number",
    "cvv",
    "ssn",
)

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """Validated celery-tracked configuration. See ``docs/configuration.md``."""

    database_url: str = "sqlite:///celery_tracked.sqlite3"
    redis_url: str = ""
    default_attempts: int = 3
    default_backoff_ms: int = 1000
    max_backoff_ms: int = 3_600_000
    max_payload_bytes: int = 65_536
    redact_keys: tuple[str, ...] = DEFAULT_REDACT_KEYS
    lease_seconds: float = 60.0
    guard_ttl_seconds: int = 86_400
    key_prefix: str = "celery_tracked"
    check_redis_eviction: bool = True

    @property
    def memory_guard(self) -> bool:
        """True when the in-process guard and notifier were chosen (``memory://``)."""
        return self.redis_url == MEMORY_URL

    @property
    def safe_database_url(self) -> str:
        return mask_url(self.database_url)

    @property
    def safe_redis_url(self) -> str:
        return mask_url(self.redis_url)

    @classmethod
    def from_conf(
        cls, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Read and validate every setting from a Celery ``app.conf`` and the environment."""
        env = os.environ if environ is None else environ
        defaults = {f.name: f.default for f in fields(cls)}

        def read(name: str, env_names: tuple[str, ...], convert: Callable[[str, Any], T]) -> T:
            setting = f"tracked_{name}"
            value = conf.get(setting)
            source = setting
            if value is None:
                for env_name in env_names:
                    if env.get(env_name) not in (None, ""):
                        value, source = env[env_name], env_name
                        break
            if value is None:
                value = defaults[name]
            try:
                return convert(source, value)
            except ConfigurationError:
                raise
            except (TypeError, ValueError) as exc:
                raise ConfigurationError(setting, f"invalid value ({exc})") from None

        def env_of(name: str) -> tuple[str, ...]:
            return (f"CELERY_TRACKED_{name.upper()}",)

        settings = cls(
            database_url=read("database_url", env_of("database_url"), _url("database_url")),
            redis_url=read("redis_url", ("REDIS_URL", *env_of("redis_url")), _redis_url),
            default_attempts=read(
                "default_attempts",
                ("JOB_QUEUE_DEFAULT_ATTEMPTS", *env_of("default_attempts")),
                _int("default_attempts", minimum=1),
            ),
            default_backoff_ms=read(
                "default_backoff_ms",
                ("JOB_QUEUE_DEFAULT_BACKOFF_MS", *env_of("default_backoff_ms")),
                _int("default_backoff_ms", minimum=0),
            ),
            max_backoff_ms=read(
                "max_backoff_ms", env_of("max_backoff_ms"), _int("max_backoff_ms", minimum=0)
            ),
            max_payload_bytes=read(
                "max_payload_bytes",
                env_of("max_payload_bytes"),
                _int("max_payload_bytes", minimum=1),
            ),
            redact_keys=read("redact_keys", env_of("redact_keys"), _keys),
            lease_seconds=read(
                "lease_seconds", env_of("lease_seconds"), _float("lease_seconds", minimum=0.5)
            ),
            guard_ttl_seconds=read(
                "guard_ttl_seconds",
                env_of("guard_ttl_seconds"),
                _int("guard_ttl_seconds", minimum=1),
            ),
            key_prefix=read("key_prefix", env_of("key_prefix"), _nonempty("key_prefix")),
            check_redis_eviction=read(
                "check_redis_eviction", env_of("check_redis_eviction"), _bool
            ),
        )
        return settings


def _nonempty(name: str) -> Callable[[str, Any], str]:
    def convert(source: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(f"tracked_{name}", "must be a non-empty string")
        return value.strip()

    return convert


def _url(name: str) -> Callable[[str, Any], str]:
    def convert(source: str, value: Any) -> str:
        text = _nonempty(name)(source, value)
        if "://" not in text:
            raise ConfigurationError(
                f"tracked_{name}", f"not a URL: {mask_url(text)!r} (from {source})"
            )
        return text

    return convert


def _redis_url(source: str, value: Any) -> str:
    if value in (None, ""):
        raise ConfigurationError(
            "tracked_redis_url",
            "not set (nor REDIS_URL): give a redis:// URL for the idempotency guard, "
            "or 'memory://' to choose the in-process guard of the embedded mode",
        )
    text = _url("redis_url")(source, value)
    if text != MEMORY_URL and not text.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigurationError(
            "tracked_redis_url",
            f"expected redis://, rediss://, unix:// or memory://, got {mask_url(text)!r}",
        )
    return text


def _int(name: str, minimum: int) -> Callable[[str, Any], int]:
    def convert(source: str, value: Any) -> int:
        if isinstance(value, bool):
            raise ConfigurationError(f"tracked_{name}", "must be an integer, not a boolean")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"tracked_{name}", f"must be an integer, got {value!r} (from {source})"
            ) from None
        if isinstance(value, float) and number != value:
            raise ConfigurationError(f"tracked_{name}", f"must be an integer, got {value!r}")
        if number < minimum:
            raise ConfigurationError(
                f"tracked_{name}", f"must be >= {minimum}, got {number} (from {source})"
            )
        return number

    return convert


def _float(name: str, minimum: float) -> Callable[[str, Any], float]:
    def convert(source: str, value: Any) -> float:
        if isinstance(value, bool):
            raise ConfigurationError(f"tracked_{name}", "must be a number, not a boolean")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"tracked_{name}", f"must be a number, got {value!r} (from {source})"
            ) from None
        if not minimum <= number < float("inf"):
            raise ConfigurationError(
                f"tracked_{name}", f"must be a finite number >= {minimum}, got {number} ({source})"
            )
        return number

    return convert


def _bool(source: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(
        "tracked_check_redis_eviction", f"must be a boolean, got {value!r} (from {source})"
    )


def _keys(source: str, value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    try:
        keys = tuple(str(k).strip().lower() for k in items if str(k).strip())
    except TypeError:
        raise ConfigurationError(
            "tracked_redact_keys", f"must be a list of key names, got {type(value).__name__}"
        ) from None
    return keys
