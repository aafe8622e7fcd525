"""Celery's retry options mapped onto the tracker's, once, when a task class is made.

Pure: no Celery, Redis or SQL. The one home of the backoff: :meth:`RetryPolicy.delay_ms`
(over :func:`backoff_ms`) gives every delay between attempts and every wait of the
library's own (the default policy); a worker's :class:`Backoff` applies both under the
settings' cap. ``retry_policy(options)`` reads a task's declared options
(a class ``__dict__``, the keywords of ``tracked_task``) and returns the
:class:`RetryPolicy` the runner and its outcome writer follow; a contradictory combination is
refused with :class:`~celery_tracked.errors.InvalidTaskOption` saying what to write.

The mapping (docs/configuration.md, "Celery's retry options"):

- ``max_retries=N`` → ``max_attempts=N + 1`` (both given and different: refused).
- ``retry_backoff=True|S`` → exponential backoff from ``S`` seconds (``True``: 1 s); with
  ``backoff_ms`` as well: refused.
- ``retry_backoff_max=S`` → the longest delay (default ``tracked_max_backoff_ms``).
- ``retry_jitter=False`` → no jitter (default: up to +25 %).
- ``default_retry_delay=S`` → a fixed delay of ``S`` seconds between attempts (with
  ``backoff_ms`` or ``retry_backoff`` as well: refused). A body's own ``self.retry()``
  keeps Celery's meaning (its ``countdown``, else ``default_retry_delay``).
- ``autoretry_for=(E, ...)`` → only those exceptions are retried, any other fails at once;
  ``autoretry_for=()`` retries nothing. ``dont_autoretry_for=(E, ...)`` → those fail at
  once. Celery's autoretry wrapper itself is bypassed: its countdown never overrides the
  policy.
- ``retry_semantics`` (the task's, else ``tracked_retry_semantics``; :meth:`RetryPolicy.under`)
  decides what is not declared. ``"celery"`` (the app default): Celery's own defaults, no
  error is retried but by ``self.retry``/``autoretry_for``, ``max_retries=3`` (4 attempts),
  a fixed ``default_retry_delay`` of 180 s. ``"tracked"`` (``@tracked_task``'s default):
  **every exception is retried**, ``tracked_default_attempts`` attempts, exponential
  backoff from ``tracked_default_backoff_ms``.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .errors import InvalidTaskOption
from .validation import delay_ms

#: Celery's retry options that the policy reads (besides ``max_attempts``/``backoff_ms``).
CELERY_RETRY_OPTIONS = (
    "autoretry_for",
    "dont_autoretry_for",
    "retry_backoff",
    "retry_backoff_max",
    "retry_jitter",
    "max_retries",
    "default_retry_delay",
)
RETRY_OPTIONS = ("max_attempts", "backoff_ms", "retry_semantics", *CELERY_RETRY_OPTIONS)

#: ``retry_semantics``: Celery's own (only ``self.retry``/``autoretry_for`` retry) ...
CELERY_SEMANTICS = "celery"
#: ... or the library's (every exception retried, ``tracked_default_attempts``, backoff).
TRACKED_SEMANTICS = "tracked"
SEMANTICS = (CELERY_SEMANTICS, TRACKED_SEMANTICS)
#: Celery's ``Task.max_retries`` and ``Task.default_retry_delay`` (seconds) defaults.
CELERY_MAX_RETRIES = 3
CELERY_RETRY_DELAY_MS = 180_000

Errors = tuple[type[BaseException], ...]


@dataclass(frozen=True)
class RetryPolicy:
    """How a task's failed attempts are retried. ``None``: the settings' default."""

    max_attempts: int | None = None
    backoff_ms: int | None = None
    cap_ms: int | None = None
    jitter: bool = True
    exponential: bool = True
    #: None: every exception is retried
    retry_on: Errors | None = None
    never_retry: Errors = ()
    #: ``"celery"`` or ``"tracked"``; None: the app's ``tracked_retry_semantics``
    semantics: str | None = None

    def under(self, app_semantics: str) -> RetryPolicy:
        """This policy with what it does not declare filled by its semantics (its own,
        else ``app_semantics``): under ``"celery"``, Celery's defaults (no error retried
        but by ``self.retry``/``autoretry_for``, 4 attempts, a fixed 180 s delay); under
        ``"tracked"``, as declared (every exception retried, the settings' defaults)."""
        semantics = self.semantics or app_semantics
        if semantics != CELERY_SEMANTICS:
            return replace(self, semantics=semantics)
        declared_delay = self.backoff_ms is not None
        return replace(
            self,
            semantics=semantics,
            max_attempts=self.max_attempts or CELERY_MAX_RETRIES + 1,
            retry_on=() if self.retry_on is None else self.retry_on,
            backoff_ms=self.backoff_ms if declared_delay else CELERY_RETRY_DELAY_MS,
            exponential=self.exponential if declared_delay else False,
        )

    def base_ms(self, default_ms: int) -> int:
        """The backoff's base (or the fixed delay), ms; ``default_ms`` when not declared."""
        return default_ms if self.backoff_ms is None else self.backoff_ms

    def retries(self, error: BaseException) -> bool:
        """Whether a body that raised ``error`` gets another attempt (if one remains)."""
        if isinstance(error, self.never_retry):
            return False
        return self.retry_on is None or isinstance(error, self.retry_on)

    def refusal(self, error: BaseException) -> str:
        """Why ``error``, one this policy does not retry (:meth:`retries`), is not: recorded
        with the failure, so that a reader that does not know the task can say it."""
        name = type(error).__name__
        if isinstance(error, self.never_retry):
            return f"{name} is in its task's dont_autoretry_for"
        if self.retry_on == () and self.semantics == CELERY_SEMANTICS:
            return (
                f"its task does not retry {name}: under Celery's retry semantics, only "
                "self.retry and autoretry_for retry"
            )
        if self.retry_on == ():
            return "its task declares autoretry_for=(), no error is retried"
        return f"{name} is not in its task's autoretry_for"

    def delay_ms(
        self,
        attempt: int,
        default_base_ms: int,
        default_cap_ms: int,
        rand: Callable[[], float] = random.random,
    ) -> int:
        """The delay after failed attempt ``attempt``, ms: the one backoff of every retry
        (a body's error, a failed completion, a run the hard time limit killed).
        ``default_*``: the settings' values, for what the task did not declare."""
        base = self.base_ms(default_base_ms)
        cap = default_cap_ms if self.cap_ms is None else self.cap_ms
        if not self.exponential:
            return min(cap, base)
        return backoff_ms(attempt, base, cap, rand if self.jitter else _no_jitter)


#: The policy of the library's own waits (not a task's retries).
OWN_WAITS = RetryPolicy()


@dataclass(frozen=True)
class Backoff:
    """A worker's delays, under the settings' ``default_base_ms`` and ``cap_ms``
    (``tracked_default_backoff_ms``, ``tracked_max_backoff_ms``): a task's retries by its
    policy (:meth:`retry_ms`) and the library's own waits (:meth:`own_wait_ms`)."""

    default_base_ms: int
    cap_ms: int

    def retry_ms(self, policy: RetryPolicy, attempt: int, base_ms: int) -> int:
        """The delay after failed attempt ``attempt`` by ``policy`` (``base_ms``: the
        task's base, its policy's or the settings' default)."""
        return policy.delay_ms(attempt, base_ms, self.cap_ms, random.random)

    def own_wait_ms(self, cap_ms: int | None = None) -> int:
        """A first wait of the library's own (the database is unavailable): the default
        policy, capped by ``cap_ms`` (else the settings')."""
        cap = self.cap_ms if cap_ms is None else cap_ms
        return OWN_WAITS.delay_ms(1, self.default_base_ms, cap, random.random)


def backoff_ms(attempt: int, base_ms: int, cap_ms: int, rand: Callable[[], float]) -> int:
    """Delay before the attempt after ``attempt``: ``base * 2**(attempt-1)`` plus up to
    25 % jitter, capped at ``cap_ms``. Never below ``base_ms`` (unless the cap is)."""
    exponential = base_ms * (2 ** max(0, attempt - 1))
    return int(min(cap_ms, exponential * (1 + 0.25 * rand())))


def _no_jitter() -> float:
    return 0.0


def _errors(name: str, value: Any) -> Errors:
    items = tuple(value) if isinstance(value, list | tuple) else (value,)
    for item in items:
        if not (inspect.isclass(item) and issubclass(item, BaseException)):
            raise InvalidTaskOption(name, f"must be a tuple of exception classes, got {value!r}")
    return items


def retry_policy(options: Mapping[str, Any]) -> RetryPolicy:
    """The policy of a task declaring ``options`` (absent or None: not declared).

    Raises:
        InvalidTaskOption: a bad value, or two options that contradict each other (the
            message says which one to write instead).
    """
    given = {name: options[name] for name in RETRY_OPTIONS if options.get(name) is not None}
    attempts = given.get("max_attempts")
    retries = given.get("max_retries")
    if retries is not None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidTaskOption("max_retries", f"must be an integer >= 0, got {retries!r}")
        if attempts is not None and attempts != retries + 1:
            raise InvalidTaskOption(
                "max_retries",
                f"max_retries={retries} means max_attempts={retries + 1}, but "
                f"max_attempts={attempts} is given too: write only max_attempts={attempts}",
            )
        attempts = retries + 1
    base = given.get("backoff_ms")
    exponential = True
    backoff = given.get("retry_backoff")
    if backoff is not None and backoff is not False and backoff != 0:
        backoff_base = 1000 if backoff is True else delay_ms("retry_backoff", backoff)
        if base is not None:
            raise InvalidTaskOption(
                "retry_backoff",
                f"retry_backoff={backoff!r} and backoff_ms={base!r} both set the backoff: "
                f"write only backoff_ms={backoff_base}",
            )
        base = backoff_base
    delay = given.get("default_retry_delay")
    if delay is not None:
        fixed = delay_ms("default_retry_delay", delay)
        if base is not None:
            raise InvalidTaskOption(
                "default_retry_delay",
                "is a fixed delay, but an exponential backoff is set too (backoff_ms or "
                "retry_backoff): write only one of them",
            )
        base, exponential = fixed, False
    cap = given.get("retry_backoff_max")
    jitter = given.get("retry_jitter", True)
    if not isinstance(jitter, bool):
        raise InvalidTaskOption("retry_jitter", f"must be True or False, got {jitter!r}")
    semantics = given.get("retry_semantics")
    if semantics is not None and semantics not in SEMANTICS:
        allowed = ", ".join(map(repr, SEMANTICS))
        raise InvalidTaskOption("retry_semantics", f"must be one of {allowed}, got {semantics!r}")
    retry_on = "autoretry_for" in options and options["autoretry_for"] is not None
    return RetryPolicy(
        semantics=semantics,
        max_attempts=attempts,
        backoff_ms=base,
        cap_ms=None if cap is None else delay_ms("retry_backoff_max", cap),
        jitter=jitter,
        exponential=exponential,
        retry_on=_errors("autoretry_for", options["autoretry_for"]) if retry_on else None,
        never_retry=_errors("dont_autoretry_for", given.get("dont_autoretry_for", ())),
    )


def declared(classes: tuple[type, ...], names: tuple[str, ...]) -> dict[str, Any]:
    """The options among ``names`` set in ``classes`` (nearest first), static values."""
    found: dict[str, Any] = {}
    for klass in classes:
        for name in names:
            if name not in found and name in klass.__dict__:
                value = inspect.getattr_static(klass, name)
                found[name] = value
    return found
