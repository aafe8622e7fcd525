"""One frozen settings object, read from ``app.conf`` with environment fallbacks.

Precedence: ``app.conf.tracked_*`` first, then the environment variable, then the
default. Values are validated once, in :meth:`Settings.from_conf`; a bad value raises
:class:`~celery_tracked.errors.ConfigurationError` naming the setting. Every number has
a range (:data:`BOUNDS`, the table in ``docs/configuration.md``); NaN, infinities and
booleans are refused. Redaction is turned off only by ``tracked_redaction = False``
(logged once per process as a warning): an empty ``tracked_redact_keys`` is refused.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from .conversions import (
    MEMORY_URL,
    boolean,
    choice,
    cleanup_schedule,
    integer,
    key_names,
    keys,
    nonempty,
    pooler,
    real,
    redis_url,
    secret_keys,
    url,
)
from .crontab import check_crontab
from .errors import ConfigurationError
from .redact import Redaction, mask_url
from .retry_policy import CELERY_SEMANTICS, SEMANTICS

logger = logging.getLogger("celery_tracked")


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

#: The embedded default store: a SQLite file in the current directory.
DEFAULT_DATABASE_URL = "sqlite:///celery_tracked.sqlite3"


@dataclass(frozen=True)
class Settings:
    """Validated celery-tracked configuration. See ``docs/configuration.md``."""

    database_url: str = DEFAULT_DATABASE_URL
    #: ``"pgbouncer"`` when PostgreSQL is reached through PgBouncer in transaction pooling
    #: mode (no server-side prepared statements); ``"none"``: prepared statements on each
    #: connection proven direct (``store.fastpath.prepare_only_if_direct``)
    database_pooler: str = "none"
    redis_url: str = ""
    #: which errors a task that declares none retries, and its default attempts and delay:
    #: ``"celery"`` (Celery's own: only ``self.retry``/``autoretry_for``, ``max_retries=3``,
    #: 180 s) or ``"tracked"`` (every exception, ``default_attempts``, backoff);
    #: ``@tracked_task`` declares ``"tracked"`` itself (``retry_policy.py``)
    retry_semantics: str = CELERY_SEMANTICS
    #: attempts of a job under the ``"tracked"`` semantics, unless its task declares them
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
    #: a job due further ahead than this is held in the database, not in the broker
    schedule_horizon_seconds: float = 300.0
    #: how often the default Beat entry runs the scheduler pass (0: no Beat entry);
    #: at most half the horizon
    schedule_interval_seconds: float = 30.0
    #: how often the default Beat entry runs the circuit pass (0: no Beat entry)
    circuit_interval_seconds: float = 5.0
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
    #: Fernet keys (``tracked_secret_key``): the values under redacted names are stored
    #: encrypted with the first, read with any (``services/sealing.py``); empty: off.
    #: Never shown (not in the repr)
    secret_key: tuple[str, ...] = field(default=(), repr=False)

    @functools.cached_property
    def masking(self) -> Redaction:
        """The masking by name these settings make (``redact_keys`` while ``redaction``),
        one value, built once: what the services and the adapter mask with."""
        return Redaction(self.redact_keys, self.redaction)

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
        default. No other name is read (a project maps its own names onto ``tracked_*``,
        as ``example_project/courses/settings.py`` does).
        """
        env = os.environ if environ is None else environ
        refuse_unknown(conf, env)
        values = {name: _read(conf, env, name) for name in _CONVERTERS if name != "redact_keys"}
        values["redact_keys"] = _redact_keys(conf, env, values["redaction"])
        _check_schedule(values["schedule_interval_seconds"], values["schedule_horizon_seconds"])
        return cls(**values)

    @classmethod
    def database_url_from_conf(
        cls, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> str:
        """Only ``tracked_database_url``, read and validated as ``from_conf()`` does
        (what ``tracked migrate`` needs: no Redis setting)."""
        env = os.environ if environ is None else environ
        refuse_unknown(conf, env)
        return str(_read(conf, env, "database_url"))

    @classmethod
    def retry_semantics_from_conf(
        cls, conf: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> str:
        """Only ``tracked_retry_semantics``, read and validated as ``from_conf()`` does
        (what a task's description needs: no URL)."""
        env = os.environ if environ is None else environ
        refuse_unknown(conf, env)
        return str(_read(conf, env, "retry_semantics"))


def _check_schedule(interval_s: float, horizon_s: float) -> None:
    """The scheduler pass must run well within the horizon, or held jobs start late."""
    if interval_s * 2 > horizon_s:
        raise ConfigurationError(
            "tracked_schedule_interval_seconds",
            f"is {interval_s:g} s: at most half of tracked_schedule_horizon_seconds "
            f"({horizon_s:g} s), so a held job is published before it is due",
        )


#: The environment variables' prefix: ``CELERY_TRACKED_<NAME>`` is ``tracked_<name>``.
ENV_PREFIX = "CELERY_TRACKED_"


def known_names() -> tuple[str, ...]:
    """Every setting's name without its prefix: the fields of :class:`Settings` (a field
    added there is known here at once)."""
    return tuple(f.name for f in fields(Settings))


def refuse_unknown(conf: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Refuse a ``tracked_*`` name in ``app.conf`` (also spelled with the app's
    namespace, ``CELERY_TRACKED_*`` in Django's settings) or a ``CELERY_TRACKED_*``
    environment variable that names no setting: a misspelled setting is never silently
    replaced by its default.

    Raises:
        ConfigurationError: naming the unknown setting and the closest known one.
    """
    known = known_names()
    for given, name, read_as in _conf_names(conf):
        if name not in known:
            raise ConfigurationError(given, _unknown(read_as + name, read_as, known))
        expected = read_as + (name if read_as.islower() else name.upper())
        if given != expected:  # TRACKED_DATABASE_URL: Celery's settings are lower case
            raise ConfigurationError(
                given,
                f"is never read (did you mean {expected!r}? Celery's settings are lower case "
                "in app.conf); an unknown name is refused, never ignored",
            )
    for variable in sorted(env):
        if variable.startswith(ENV_PREFIX) and variable[len(ENV_PREFIX) :].lower() not in known:
            raise ConfigurationError(variable, _unknown(variable, ENV_PREFIX, known))


def _conf_names(conf: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(key as given, setting name, the prefix of the key Celery reads for it)`` of each
    ``tracked_*`` key of ``conf`` in any case: ``tracked_``, or with the app's namespace
    (``config_from_object(..., namespace="CELERY")``: ``CELERY_TRACKED_``, which Celery
    reads as ``tracked_x``)."""
    conf.get("tracked_database_url")  # Celery's pending conf is loaded by a lookup only
    prefix = str(getattr(conf, "prefix", None) or "")
    namespace = prefix.lower()
    found = []
    for key in list(conf):
        if not isinstance(key, str):
            continue
        lowered, read_as = key.lower(), "tracked_"
        if namespace and lowered.startswith(namespace):
            lowered = lowered[len(namespace) :]
            read_as = prefix + ("TRACKED_" if prefix.isupper() else "tracked_")
        if lowered.startswith("tracked_"):
            found.append((key, lowered[len("tracked_") :], read_as))
    return sorted(found)


def _unknown(given: str, prefix: str, known: tuple[str, ...]) -> str:
    """The refusal of an unknown name, with the closest known one (``difflib``, after
    the usual abbreviations are spelled out: ``db_url`` is ``database_url``)."""
    name = given[len(prefix) :].lower()
    spelled = "_".join(_ABBREVIATIONS.get(word, word) for word in name.split("_"))
    close = difflib.get_close_matches(spelled, known, n=1, cutoff=0.6)
    if close:
        closest = close[0] if prefix.islower() else close[0].upper()
        hint = f"did you mean {prefix + closest!r}?"
    else:
        hint = "see docs/configuration.md for the list"
    return f"is not a celery-tracked setting ({hint}); an unknown name is refused, never ignored"


#: Words a misspelled setting often shortens.
_ABBREVIATIONS = {
    "db": "database",
    "uri": "url",
    "dsn": "url",
    "s": "seconds",
    "sec": "seconds",
    "secs": "seconds",
    "second": "seconds",
    "ttl": "ttl_seconds",
    "retries": "attempts",
}


def _given(conf: Mapping[str, Any], env: Mapping[str, str], name: str) -> tuple[Any, str]:
    """``(value, where it came from)``: ``app.conf``, then ``CELERY_TRACKED_<NAME>``;
    ``(None, ...)`` when neither gives it."""
    setting = f"tracked_{name}"
    value = conf.get(setting)
    if value is not None:
        return value, setting
    env_name = f"CELERY_TRACKED_{name.upper()}"
    if env.get(env_name) not in (None, ""):
        return env[env_name], env_name
    return None, setting


def _read(conf: Mapping[str, Any], env: Mapping[str, str], name: str) -> Any:
    """One setting, given or its default; converted and validated."""
    setting = f"tracked_{name}"
    if name in _NONE_IS_A_VALUE and setting in conf and conf.get(setting) is None:
        return None  # set to None on purpose (``tracked_cleanup_schedule = None``: off)
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
    if value is not None and key_names(source, value):
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


#: Settings where an explicit ``None`` in ``app.conf`` is a value (off), not "unset".
_NONE_IS_A_VALUE = ("cleanup_schedule",)
#: Each setting: its name (``tracked_<name>``, ``CELERY_TRACKED_<NAME>``), its converter.
_CONVERTERS: dict[str, Callable[[str, Any], Any]] = {
    "database_url": url("database_url"),
    "database_pooler": pooler,
    "redis_url": redis_url,
    "retry_semantics": choice("retry_semantics", SEMANTICS),
    "default_attempts": integer("default_attempts"),
    "default_backoff_ms": integer("default_backoff_ms"),
    "max_backoff_ms": integer("max_backoff_ms"),
    "max_payload_bytes": integer("max_payload_bytes"),
    "redact_keys": keys,
    "redaction": boolean("redaction"),
    "lease_seconds": real("lease_seconds"),
    "guard_ttl_seconds": integer("guard_ttl_seconds"),
    "key_prefix": nonempty("key_prefix"),
    "check_redis_eviction": boolean("check_redis_eviction"),
    "relay_grace_seconds": real("relay_grace_seconds"),
    "relay_interval_seconds": real("relay_interval_seconds"),
    "schedule_horizon_seconds": real("schedule_horizon_seconds"),
    "schedule_interval_seconds": real("schedule_interval_seconds"),
    "circuit_interval_seconds": real("circuit_interval_seconds"),
    "progress_interval_ms": integer("progress_interval_ms"),
    "log_lines_per_job": integer("log_lines_per_job"),
    "rate_limit_ms": integer("rate_limit_ms"),
    "concurrency_limit": integer("concurrency_limit"),
    "metrics": boolean("metrics"),
    "reaper_interval_seconds": real("reaper_interval_seconds"),
    "reaper_processing_seconds": real("reaper_processing_seconds"),
    "reaper_retrying_seconds": real("reaper_retrying_seconds"),
    "reaper_pending_seconds": real("reaper_pending_seconds"),
    "reaper_max_rescues": integer("reaper_max_rescues"),
    "cleanup_schedule": cleanup_schedule(check_crontab),
    "retention_completed_days": real("retention_completed_days"),
    "retention_failed_days": real("retention_failed_days"),
    "retention_keep_newest": integer("retention_keep_newest"),
    "cleanup_batch_size": integer("cleanup_batch_size"),
    "secret_key": secret_keys,
}
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Settings)}
