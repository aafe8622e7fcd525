"""Converters of the ``tracked_*`` settings: each turns a value given in ``app.conf`` or
the environment into its type, or raises ``ConfigurationError`` naming the setting. Every
numeric setting has a range (``BOUNDS``; docs/configuration.md, "Ranges"), checked by
:mod:`celery_tracked.validation` as the task options' are. No Celery here: a crontab is
checked by the function given (``crontab.check_crontab``: Celery's reading, no Celery)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from .cleanup import MAX_DAYS as MAX_RETENTION_DAYS
from .errors import ConfigurationError
from .redact import mask_url, normalise_key, short_repr
from .validation import Bound as Bound  # re-exported: the ranges below are Bounds
from .validation import within

MEMORY_URL = "memory://"


def nonempty(name: str) -> Callable[[str, Any], str]:
    def convert(source: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigurationError(f"tracked_{name}", "must be a non-empty string")
        return value.strip()

    return convert


def url(name: str) -> Callable[[str, Any], str]:
    def convert(source: str, value: Any) -> str:
        text = nonempty(name)(source, value)
        if "://" not in text:
            raise ConfigurationError(
                f"tracked_{name}", f"not a URL: {mask_url(text)!r} (from {source})"
            )
        if name == "database_url" and text.split("://")[0].split("+")[0].lower() == "postgres":
            raise ConfigurationError(
                f"tracked_{name}",
                f"{mask_url(text)!r} (from {source}): SQLAlchemy has no dialect named "
                "'postgres' (Heroku-style URL): write postgresql+psycopg://... instead "
                "(psycopg 3, the 'postgres' extra)",
            )
        return text

    return convert


def redis_url(source: str, value: Any) -> str:
    if value in (None, ""):
        raise ConfigurationError(
            "tracked_redis_url",
            "not set (nor CELERY_TRACKED_REDIS_URL): give a redis:// URL for the idempotency "
            "guard, or 'memory://' to choose the in-process guard of the embedded mode",
        )
    text = url("redis_url")(source, value)
    if text != MEMORY_URL and not text.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigurationError(
            "tracked_redis_url",
            f"expected redis://, rediss://, unix:// or memory://, got {mask_url(text)!r}",
        )
    return text


_DAY_S = 86_400
CLEANUP_BATCH_MAX = 10_000
#: Every numeric setting's range (``docs/configuration.md`` shows this table). An upper
#: bound keeps each value within what the code computes with (timer waits, datetimes,
#: Celery's countdown, the INTEGER columns) and far beyond any useful value.
BOUNDS: dict[str, Bound] = {
    "default_attempts": Bound(1, 2**31 - 1),
    "default_backoff_ms": Bound(0, 7 * _DAY_S * 1000),
    "max_backoff_ms": Bound(0, 7 * _DAY_S * 1000),
    "max_payload_bytes": Bound(1, 16 * 2**20),
    "lease_seconds": Bound(0.5, _DAY_S),
    "guard_ttl_seconds": Bound(1, 365 * _DAY_S),
    "relay_grace_seconds": Bound(1, 7 * _DAY_S),
    "relay_interval_seconds": Bound(1, _DAY_S, zero="no Beat entry"),
    "schedule_horizon_seconds": Bound(1, 7 * _DAY_S),
    "schedule_interval_seconds": Bound(0.5, _DAY_S / 2, zero="no Beat entry"),
    "circuit_interval_seconds": Bound(0.5, _DAY_S, zero="no Beat entry"),
    "progress_interval_ms": Bound(0, 3_600_000),
    "log_lines_per_job": Bound(0, 100_000),
    "rate_limit_ms": Bound(1, _DAY_S * 1000),
    "concurrency_limit": Bound(1, 10_000),
    "reaper_interval_seconds": Bound(1, _DAY_S, zero="no Beat entry"),
    "reaper_processing_seconds": Bound(0, 7 * _DAY_S),
    "reaper_retrying_seconds": Bound(1, 7 * _DAY_S),
    "reaper_pending_seconds": Bound(1, 30 * _DAY_S),
    "reaper_max_rescues": Bound(0, 1_000),
    "retention_completed_days": Bound(0, MAX_RETENTION_DAYS),
    "retention_failed_days": Bound(0, MAX_RETENTION_DAYS),
    "retention_keep_newest": Bound(0, 10_000_000),
    "cleanup_batch_size": Bound(1, CLEANUP_BATCH_MAX),
}

N = TypeVar("N", int, float)


def integer(name: str) -> Callable[[str, Any], int]:
    return number(name, int)


def real(name: str) -> Callable[[str, Any], float]:
    return number(name, float)


#: The cleanup's schedule given in seconds (not in ``BOUNDS``: it may be a crontab too).
SCHEDULE_SECONDS = Bound(1, 365 * _DAY_S, zero="no Beat entry")


def number(name: str, kind: type[N], bound: Bound | None = None) -> Callable[[str, Any], N]:
    """A converter to ``kind`` within ``bound`` (default ``BOUNDS[name]``; an integer
    refuses fractions; NaN, infinities and booleans are refused)."""
    setting, bound = f"tracked_{name}", bound or BOUNDS[name]
    allowed = bound.describe(kind is int)

    def convert(source: str, value: Any) -> N:
        if isinstance(value, bool):
            raise ConfigurationError(setting, f"must be {allowed}, not a boolean")
        try:
            number = kind(value)
        except (TypeError, ValueError, ArithmeticError):
            raise ConfigurationError(
                setting, f"must be {allowed}, got {short_repr(value)} (from {source})"
            ) from None
        fraction = kind is int and isinstance(value, float) and number != value
        if fraction or not within(number, bound):
            raise ConfigurationError(
                setting, f"must be {allowed}, got {short_repr(value)} (from {source})"
            )
        return number

    return convert


POOLERS = ("none", "pgbouncer")


def pooler(source: str, value: Any) -> str:
    text = str(value).strip().lower()
    if text not in POOLERS:
        raise ConfigurationError(
            "tracked_database_pooler",
            f"must be one of {', '.join(POOLERS)}, got {value!r} (from {source})",
        )
    return text


def choice(name: str, allowed: tuple[str, ...]) -> Callable[[str, Any], str]:
    """One of ``allowed`` (case and surrounding spaces ignored)."""

    def convert(source: str, value: Any) -> str:
        text = str(value).strip().lower()
        if text not in allowed:
            raise ConfigurationError(
                f"tracked_{name}",
                f"must be one of {', '.join(allowed)}, got {value!r} (from {source})",
            )
        return text

    return convert


def boolean(name: str) -> Callable[[str, Any], bool]:
    def convert(source: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigurationError(
            f"tracked_{name}", f"must be a boolean, got {value!r} (from {source})"
        )

    return convert


def key_names(source: str, value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    try:
        return tuple(normalise_key(str(k)) for k in items if str(k).strip())
    except TypeError:
        raise ConfigurationError(
            "tracked_redact_keys", f"must be a list of key names, got {type(value).__name__}"
        ) from None


def keys(source: str, value: Any) -> tuple[str, ...]:
    keys = key_names(source, value)
    if not keys:
        raise ConfigurationError(
            "tracked_redact_keys",
            f"is empty (from {source}), which would turn redaction off: to turn it off, "
            "set tracked_redaction = False (CELERY_TRACKED_REDACTION=false) instead",
        )
    return keys


def secret_keys(source: str, value: Any) -> tuple[str, ...]:
    """``tracked_secret_key``: one Fernet key, or several for rotation (a list, or one
    comma-separated string; the first encrypts, all decrypt). Empty: off. A refusal never
    shows a key, only its position."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigurationError(
            "tracked_secret_key",
            f"must be a Fernet key, a list of them or a comma-separated string (from "
            f"{source}), got {type(value).__name__}",
        )
    found: list[str] = []
    for position, item in enumerate(items, 1):
        key = item.decode("ascii", "replace") if isinstance(item, bytes) else item
        if not isinstance(key, str):
            raise ConfigurationError(
                "tracked_secret_key", f"key {position} (from {source}) is not a string"
            )
        key = key.strip()
        if key and not _fernet_shaped(key):
            raise ConfigurationError(
                "tracked_secret_key",
                f"key {position} (from {source}) is not a Fernet key (32 url-safe "
                'base64-encoded bytes): make one with `python -c "from cryptography.fernet '
                'import Fernet; print(Fernet.generate_key().decode())"`',
            )
        if key:
            found.append(key)
    return tuple(found)


def _fernet_shaped(key: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(key.encode("ascii"))) == 32
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return False


#: The words that turn the cleanup's default Beat entry off.
_OFF = ("off", "none", "false", "no", "0", "")


def cleanup_schedule(check_crontab: Callable[[str], None]) -> Callable[[str, Any], object]:
    """The converter of ``tracked_cleanup_schedule``: a crontab string (``"17 3 * * *"``,
    its fields checked by ``check_crontab``, which raises ``ValueError``: ``crontab.py``),
    seconds (> 0) or a ``timedelta``, a Celery schedule object,
    or off (``False``, ``0``, ``"off"``): None."""

    def convert(source: str, value: Any) -> object:
        return _schedule(check_crontab, source, value)

    return convert


def _schedule(check_crontab: Callable[[str], None], source: str, value: Any) -> object:
    setting = "tracked_cleanup_schedule"
    if value is True:
        raise ConfigurationError(
            setting, "True is not a schedule: give a crontab string, seconds, or False (off)"
        )
    if value is False or (isinstance(value, str) and value.strip().lower() in _OFF):
        return None
    if hasattr(value, "is_due"):  # crontab(), schedule(), solar()
        return value
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, str) and len(value.split()) == 5:
        text = " ".join(value.split())
        try:
            check_crontab(text)
        except ValueError as exc:
            raise ConfigurationError(setting, f"invalid crontab {value!r}: {exc}") from None
        return text
    seconds = number("cleanup_schedule", float, SCHEDULE_SECONDS)(source, value)
    return None if seconds == 0 else seconds
