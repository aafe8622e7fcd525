"""One frozen settings object, read from ``app.conf`` with environment fallbacks.

Precedence: ``app.conf.tracked_*`` first, then the environment variable, then the
default. Values are validated once, in :meth:`Settings.from_conf`; a bad value raises
:class:`~celery_tracked.errors.ConfigurationError` naming the setting.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, TypeVar

from .errors import ConfigurationError, mask_url
from .redact import normalise_key
from .retention import MAX_DAYS as MAX_RETENTION_DAYS

MEMORY_URL = "memory://"

#: See ``redact.py`` for how a key matches a name (short keys: whole words; ``*_key``:
#: any name ending in ``_key`` but ``idempotency_key`` and other identifiers).
DEFAULT_REDACT_KEYS: tuple[str, ...] = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "*_key",
    "authorization",
    "auth",
    "credential",
    "private_key",
    "jwt",
    "otp",
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
    #: ``"pgbouncer"`` when PostgreSQL is reached through PgBouncer in transaction pooling
    #: mode (no server-side prepared statements); ``"none"``: prepared statements on each
    #: connection proven direct (``store.fastpath.prepare_only_if_direct``)
    database_pooler: str = "none"
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
    #: a pending row whose message was never handed over is relayed after this long
    relay_grace_seconds: float = 60.0
    #: how often the default Beat entry runs the relay (0: no Beat entry)
    relay_interval_seconds: float = 30.0
    #: a running body's progress is written at most once per this many ms (0: every call)
    progress_interval_ms: int = 500
    #: ``self.log`` lines kept per job (then one marker line, then none)
    log_lines_per_job: int = 200
    #: the interval of a global rate limiter a task names without one (``limits.py``)
    rate_limit_ms: int = 2000
    #: the limit of a concurrency key a task declares without ``concurrency_limit``
    concurrency_limit: int = 2
    #: count transitions for Prometheus (``metrics.py``; needs the ``prometheus`` extra)
    metrics: bool = False
    #: how often the default Beat entry runs the reaper (0: no Beat entry; ``reaper.py``)
    reaper_interval_seconds: float = 60.0
    #: a ``processing`` job is rescued this long after its lease could be taken over
    reaper_processing_seconds: float = 60.0
    #: a ``retrying`` job is rescued this long after its backoff was due
    reaper_retrying_seconds: float = 300.0
    #: a ``pending`` job is rescued this long after its message was handed to the broker
    reaper_pending_seconds: float = 600.0
    #: rescues of one job before the reaper fails it (``abandoned``) instead
    reaper_max_rescues: int = 5
    #: when the default Beat entry runs the cleanup: a 5-field crontab string (Beat's
    #: timezone), a number of seconds, or a Celery schedule; None: no Beat entry
    #: (``False``/``"off"``/``0`` in the configuration)
    cleanup_schedule: object = "17 3 * * *"
    #: ``completed`` jobs are removed this many days after they finished
    retention_completed_days: float = 7.0
    #: ``failed`` and ``cancelled`` jobs are removed this many days after they ended
    retention_failed_days: float = 30.0
    #: the newest this many ended jobs per queue and status are kept whatever their age
    retention_keep_newest: int = 0
    #: rows removed per cleanup transaction
    cleanup_batch_size: int = 5000

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
        """Read and validate every setting from a Celery ``app.conf`` and the environment.

        Precedence: ``app.conf.tracked_<name>``, then ``CELERY_TRACKED_<NAME>``, then the
        seeds' alias (``REDIS_URL``...), then the default.
        """
        env = os.environ if environ is None else environ
        return cls(**{name: _read(conf, env, name) for name, _, _ in _SOURCES})

    @classmethod
    def database_url_from_conf(
        cls, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> str:
        """Only ``tracked_database_url``, read and validated as :meth:`from_conf` does
        (what ``tracked migrate`` needs: no Redis setting)."""
        return str(_read(conf, os.environ if environ is None else environ, "database_url"))


def _read(conf: Mapping[str, Any], env: Mapping[str, str], name: str) -> Any:
    """One setting: ``app.conf``, then ``CELERY_TRACKED_<NAME>``, then the aliases, then
    the default; converted and validated."""
    alias, convert = _ALIASES[name], _CONVERTERS[name]
    setting = f"tracked_{name}"
    value, source = conf.get(setting), setting
    if value is None and name in _NONE_IS_A_VALUE and setting in conf:
        return None  # set to None on purpose (``tracked_cleanup_schedule = None``: off)
    if value is None:
        for env_name in (f"CELERY_TRACKED_{name.upper()}", *alias):
            if env.get(env_name) not in (None, ""):
                value, source = env[env_name], env_name
                break
    try:
        return convert(source, _DEFAULTS[name] if value is None else value)
    except ConfigurationError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(setting, f"invalid value ({exc})") from None


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
    return _number(name, int, minimum)


def _float(name: str, minimum: float) -> Callable[[str, Any], float]:
    return _number(name, float, minimum)


N = TypeVar("N", int, float)


def _number(name: str, kind: type[N], minimum: N) -> Callable[[str, Any], N]:
    """A converter to ``kind`` (an integer refuses fractions, a float infinity)."""
    setting, noun = f"tracked_{name}", "an integer" if kind is int else "a number"

    def convert(source: str, value: Any) -> N:
        if isinstance(value, bool):
            raise ConfigurationError(setting, f"must be {noun}, not a boolean")
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise ConfigurationError(
                setting, f"must be {noun}, got {value!r} (from {source})"
            ) from None
        if kind is int and isinstance(value, float) and number != value:
            raise ConfigurationError(setting, f"must be {noun}, got {value!r}")
        if not minimum <= number < float("inf"):
            finite = "" if kind is int else "a finite number "
            raise ConfigurationError(
                setting, f"must be {finite}>= {minimum}, got {number} (from {source})"
            )
        return number

    return convert


POOLERS = ("none", "pgbouncer")


def _pooler(source: str, value: Any) -> str:
    text = str(value).strip().lower()
    if text not in POOLERS:
        raise ConfigurationError(
            "tracked_database_pooler",
            f"must be one of {', '.join(POOLERS)}, got {value!r} (from {source})",
        )
    return text


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


def _flag(name: str) -> Callable[[str, Any], bool]:
    def convert(source: str, value: Any) -> bool:
        try:
            return _bool(source, value)
        except ConfigurationError:
            raise ConfigurationError(
                f"tracked_{name}", f"must be a boolean, got {value!r} (from {source})"
            ) from None

    return convert


def _keys(source: str, value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    try:
        keys = tuple(normalise_key(str(k)) for k in items if str(k).strip())
    except TypeError:
        raise ConfigurationError(
            "tracked_redact_keys", f"must be a list of key names, got {type(value).__name__}"
        ) from None
    return keys


#: Settings where an explicit ``None`` in ``app.conf`` is a value (off), not "unset".
_NONE_IS_A_VALUE = ("cleanup_schedule",)
#: The words that turn the cleanup's default Beat entry off.
_OFF = ("off", "none", "false", "no", "0", "")
CLEANUP_BATCH_MAX = 10_000


def _cleanup_schedule(source: str, value: Any) -> object:
    """A crontab string (``"17 3 * * *"``), seconds (> 0) or a ``timedelta``, a Celery
    schedule object, or off (``False``, ``0``, ``"off"``): None."""
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
        from celery.schedules import crontab  # only to check the fields

        text = " ".join(value.split())
        try:
            crontab.from_string(text)
        except ValueError as exc:
            raise ConfigurationError(setting, f"invalid crontab {value!r}: {exc}") from None
        return text
    seconds = _float("cleanup_schedule", minimum=0.0)(source, value)
    return None if seconds == 0 else seconds


def _batch_size(source: str, value: Any) -> int:
    size = _int("cleanup_batch_size", minimum=1)(source, value)
    if size > CLEANUP_BATCH_MAX:
        raise ConfigurationError(
            "tracked_cleanup_batch_size", f"must be at most {CLEANUP_BATCH_MAX}, got {size}"
        )
    return size


def _days(name: str) -> Callable[[str, Any], float]:
    def convert(source: str, value: Any) -> float:
        number = _float(name, minimum=0.0)(source, value)
        if number > MAX_RETENTION_DAYS:
            raise ConfigurationError(
                f"tracked_{name}", f"must be at most {MAX_RETENTION_DAYS:.0f} days, got {number}"
            )
        return number

    return convert


#: Each setting: its name, the seeds' environment aliases, its converter.
_SOURCES: tuple[tuple[str, tuple[str, ...], Callable[[str, Any], Any]], ...] = (
    ("database_url", (), _url("database_url")),
    ("database_pooler", (), _pooler),
    ("redis_url", ("REDIS_URL",), _redis_url),
    ("default_attempts", ("JOB_QUEUE_DEFAULT_ATTEMPTS",), _int("default_attempts", minimum=1)),
    ("default_backoff_ms", ("JOB_QUEUE_DEFAULT_BACKOFF_MS",), _int("default_backoff_ms", 0)),
    ("max_backoff_ms", (), _int("max_backoff_ms", minimum=0)),
    ("max_payload_bytes", (), _int("max_payload_bytes", minimum=1)),
    ("redact_keys", (), _keys),
    ("lease_seconds", (), _float("lease_seconds", minimum=0.5)),
    ("guard_ttl_seconds", (), _int("guard_ttl_seconds", minimum=1)),
    ("key_prefix", (), _nonempty("key_prefix")),
    ("check_redis_eviction", (), _bool),
    ("relay_grace_seconds", (), _float("relay_grace_seconds", minimum=1.0)),
    ("relay_interval_seconds", (), _float("relay_interval_seconds", minimum=0.0)),
    ("progress_interval_ms", (), _int("progress_interval_ms", minimum=0)),
    ("log_lines_per_job", (), _int("log_lines_per_job", minimum=0)),
    ("rate_limit_ms", ("JOB_QUEUE_COURSE_GEN_LIMITER_MS",), _int("rate_limit_ms", minimum=1)),
    (
        "concurrency_limit",
        ("JOB_QUEUE_COURSE_GEN_CONCURRENCY",),
        _int("concurrency_limit", minimum=1),
    ),
    ("metrics", (), _flag("metrics")),
    ("reaper_interval_seconds", (), _float("reaper_interval_seconds", minimum=0.0)),
    ("reaper_processing_seconds", (), _float("reaper_processing_seconds", minimum=0.0)),
    ("reaper_retrying_seconds", (), _float("reaper_retrying_seconds", minimum=1.0)),
    ("reaper_pending_seconds", (), _float("reaper_pending_seconds", minimum=1.0)),
    ("reaper_max_rescues", (), _int("reaper_max_rescues", minimum=0)),
    ("cleanup_schedule", (), _cleanup_schedule),
    ("retention_completed_days", (), _days("retention_completed_days")),
    ("retention_failed_days", (), _days("retention_failed_days")),
    ("retention_keep_newest", (), _int("retention_keep_newest", minimum=0)),
    ("cleanup_batch_size", (), _batch_size),
)
_ALIASES = {name: alias for name, alias, _ in _SOURCES}
_CONVERTERS = {name: convert for name, _, convert in _SOURCES}
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Settings)}
