"""One frozen settings object, read from ``app.conf`` with environment fallbacks.

Precedence: ``app.conf.tracked_*`` first, then the environment variable, then the
default. Values are validated once, in :meth:`Settings.from_conf`; a bad value raises
:class:`~celery_tracked.errors.ConfigurationError` naming the setting. Every number has
a range (:data:`BOUNDS`, the table in ``docs/configuration.md``); NaN, infinities and
booleans are refused. Redaction is turned off only by ``tracked_redaction = False``
(logged once per process as a warning): an empty ``tracked_redact_keys`` is refused.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, TypeVar

from .celery_state import describe_app, is_celery_default
from .errors import ConfigurationError, mask_url, short_repr
from .redact import normalise_key

logger = logging.getLogger("celery_tracked")

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
    #: mode (no server-side prepared statements); ``"none"`` otherwise
    database_pooler: str = "none"
    redis_url: str = ""
    default_attempts: int = 3
    default_backoff_ms: int = 1000
    max_backoff_ms: int = 3_600_000
    max_payload_bytes: int = 65_536
    redact_keys: tuple[str, ...] = DEFAULT_REDACT_KEYS
    #: False: no argument is redacted by name (``redact_keys`` is then empty); the
    #: explicit, logged opt-out (URL credentials are still masked)
    redaction: bool = True
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
        values = {name: _read(conf, env, name) for name, _, _ in _SOURCES if name != "redact_keys"}
        values["redact_keys"] = _redact_keys(conf, env, values["redaction"])
        return cls(**values)

    @classmethod
    def for_app(cls, app: Any, environ: Mapping[str, str] | None = None) -> Settings:
        """:meth:`from_conf` of a Celery app's ``conf``; a refusal also names the app that
        was read and, for Celery's own default app, why it was read and the fix (also
        logged as a warning when that app's settings are accepted).

        Raises:
            ConfigurationError: as :meth:`from_conf`.
        """
        try:
            settings = cls.from_conf(app.conf, environ)
        except ConfigurationError as exc:
            raise type(exc)(exc.setting, f"{exc.reason} ({describe_app(app)})") from None
        if is_celery_default(app):  # it may well be a mistake: say so once
            logger.warning("celery-tracked: tracking jobs with settings %s", describe_app(app))
        return settings

    @classmethod
    def database_url_from_conf(
        cls, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> str:
        """Only ``tracked_database_url``, read and validated as :meth:`from_conf` does
        (what ``tracked migrate`` needs: no Redis setting)."""
        return str(_read(conf, os.environ if environ is None else environ, "database_url"))


def _given(conf: Mapping[str, Any], env: Mapping[str, str], name: str) -> tuple[Any, str]:
    """``(value, where it came from)``: ``app.conf``, then ``CELERY_TRACKED_<NAME>``, then
    the aliases; ``(None, ...)`` when none gives it."""
    setting = f"tracked_{name}"
    value = conf.get(setting)
    if value is not None:
        return value, setting
    for env_name in (f"CELERY_TRACKED_{name.upper()}", *_ALIASES[name]):
        if env.get(env_name) not in (None, ""):
            return env[env_name], env_name
    return None, setting


def _read(conf: Mapping[str, Any], env: Mapping[str, str], name: str) -> Any:
    """One setting, given or its default; converted and validated."""
    value, source = _given(conf, env, name)
    try:
        return _CONVERTERS[name](source, _DEFAULTS[name] if value is None else value)
    except ConfigurationError:
        raise
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise ConfigurationError(f"tracked_{name}", f"invalid value ({exc})") from None


def _redact_keys(conf: Mapping[str, Any], env: Mapping[str, str], redaction: bool) -> Any:
    """``tracked_redact_keys``: never empty while redaction is on; unset (or empty) when
    ``tracked_redaction = False`` turned it off."""
    if redaction:
        return _read(conf, env, "redact_keys")
    value, source = _given(conf, env, "redact_keys")
    if value is not None and _key_names(source, value):
        raise ConfigurationError(
            "tracked_redaction",
            f"is False (no argument is redacted), but tracked_redact_keys is given too "
            f"(from {source}): remove one of them",
        )
    _warn_redaction_off()
    return ()


@functools.cache  # once per process
def _warn_redaction_off() -> None:
    logger.warning(
        "tracked_redaction is False: arguments are stored, shown (argsrepr/kwargsrepr, "
        "Flower) and logged without redaction by name; only credentials in URLs are masked"
    )


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


class Bound(NamedTuple):
    """The range of a numeric setting: ``low..high``, and 0 too when ``zero`` says what
    it means."""

    low: float
    high: float
    zero: str = ""

    def describe(self, integer: bool) -> str:
        kind = "an integer" if integer else "a number"
        text = f"{kind} from {_plain(self.low)} to {_plain(self.high)}"
        return f"{text}, or 0 ({self.zero})" if self.zero else text


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


_DAY_S = 86_400
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
    "progress_interval_ms": Bound(0, 3_600_000),
    "log_lines_per_job": Bound(0, 100_000),
    "rate_limit_ms": Bound(1, _DAY_S * 1000),
    "concurrency_limit": Bound(1, 10_000),
}

N = TypeVar("N", int, float)


def _int(name: str) -> Callable[[str, Any], int]:
    return _number(name, int)


def _float(name: str) -> Callable[[str, Any], float]:
    return _number(name, float)


def _number(name: str, kind: type[N]) -> Callable[[str, Any], N]:
    """A converter to ``kind`` within ``BOUNDS[name]`` (an integer refuses fractions; NaN,
    infinities and booleans are refused)."""
    setting, bound = f"tracked_{name}", BOUNDS[name]
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
        zero = bool(bound.zero) and number == 0
        finite = isinstance(number, int) or math.isfinite(number)  # a huge int: no float
        if fraction or not (zero or (finite and bound.low <= number <= bound.high)):
            raise ConfigurationError(
                setting, f"must be {allowed}, got {short_repr(value)} (from {source})"
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


def _bool(name: str) -> Callable[[str, Any], bool]:
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


def _key_names(source: str, value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    try:
        return tuple(normalise_key(str(k)) for k in items if str(k).strip())
    except TypeError:
        raise ConfigurationError(
            "tracked_redact_keys", f"must be a list of key names, got {type(value).__name__}"
        ) from None


def _keys(source: str, value: Any) -> tuple[str, ...]:
    keys = _key_names(source, value)
    if not keys:
        raise ConfigurationError(
            "tracked_redact_keys",
            f"is empty (from {source}), which would turn redaction off: to turn it off, "
            "set tracked_redaction = False (CELERY_TRACKED_REDACTION=false) instead",
        )
    return keys


#: Each setting: its name, the seeds' environment aliases, its converter.
_SOURCES: tuple[tuple[str, tuple[str, ...], Callable[[str, Any], Any]], ...] = (
    ("database_url", (), _url("database_url")),
    ("database_pooler", (), _pooler),
    ("redis_url", ("REDIS_URL",), _redis_url),
    ("default_attempts", ("JOB_QUEUE_DEFAULT_ATTEMPTS",), _int("default_attempts")),
    ("default_backoff_ms", ("JOB_QUEUE_DEFAULT_BACKOFF_MS",), _int("default_backoff_ms")),
    ("max_backoff_ms", (), _int("max_backoff_ms")),
    ("max_payload_bytes", (), _int("max_payload_bytes")),
    ("redact_keys", (), _keys),
    ("redaction", (), _bool("redaction")),
    ("lease_seconds", (), _float("lease_seconds")),
    ("guard_ttl_seconds", (), _int("guard_ttl_seconds")),
    ("key_prefix", (), _nonempty("key_prefix")),
    ("check_redis_eviction", (), _bool("check_redis_eviction")),
    ("relay_grace_seconds", (), _float("relay_grace_seconds")),
    ("relay_interval_seconds", (), _float("relay_interval_seconds")),
    ("progress_interval_ms", (), _int("progress_interval_ms")),
    ("log_lines_per_job", (), _int("log_lines_per_job")),
    ("rate_limit_ms", ("JOB_QUEUE_COURSE_GEN_LIMITER_MS",), _int("rate_limit_ms")),
    ("concurrency_limit", ("JOB_QUEUE_COURSE_GEN_CONCURRENCY",), _int("concurrency_limit")),
)
_ALIASES = {name: alias for name, alias, _ in _SOURCES}
_CONVERTERS = {name: convert for name, _, convert in _SOURCES}
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Settings)}
