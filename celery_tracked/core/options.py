"""The tracked options of a task, checked once when its class is made.

``@tracked_task(...)``, ``@app.task(base=TrackedTask, ...)`` and ``class X(TrackedTask)``
all end in a new ``TrackedTask`` subclass (Celery builds decorated tasks with ``type()``),
so ``TrackedTask.__init_subclass__`` checks them here: a bad value is refused at
decoration with :class:`~celery_tracked.errors.InvalidTaskOption`, never met by a worker
halfway through a job; :func:`describe` then makes the task's
:class:`~celery_tracked.description.TaskDescription` from them. Pure: no Celery, Redis or
SQL.

The options (``None``: the default):
    tracked_queue: the queue jobs are sent to unless the call names one
        (``tracked_task(queue=...)`` sets it; ``task_routes`` work as usual).
    job_type: logical type, default the task name; idempotency keys are unique per type.
    max_attempts: attempts before ``failed`` (default ``tracked_default_attempts``).
    backoff_ms: base of the exponential backoff, an integer of milliseconds (default
        ``tracked_default_backoff_ms``).
    Celery's ``max_retries``, ``autoretry_for``, ``dont_autoretry_for``, ``retry_backoff``,
    ``retry_backoff_max``, ``retry_jitter`` and ``default_retry_delay`` map onto these
    (``retry_policy.py``). ``retry_semantics``: what a task that declares none of them
    retries: ``"celery"`` (only ``self.retry``/``autoretry_for``; Celery's ``max_retries``
    of 3 and 180 s delay) or ``"tracked"`` (EVERY exception, ``tracked_default_attempts``,
    backoff); default: the app's ``tracked_retry_semantics`` (``"celery"``), but
    ``@tracked_task`` declares ``"tracked"``.
    idempotency_key: a ``str.format`` template naming the call's arguments
        (``"ocr:{document_id}"``; no attribute or index access, no positional fields) or a
        callable taking the call's arguments. A key given per call is taken literally.
    key_lifetime, throttle_s, debounce_s: how long a key keeps new jobs out: ``"row"``
        (the default), ``"ended"``, ``"throttle"`` (with ``throttle_s``) or ``"debounce"``
        (optionally ``debounce_s``); see ``keys.py``.
    rate_limit_global, concurrency_key, concurrency_limit, fairness_key: a global rate
        limiter shared by every worker, and at most N jobs ``processing`` per key, whose
        freed slots go round-robin by fairness key; see ``limits.py``.
    circuit, circuit_threshold, circuit_window_s, circuit_cooldown_s, circuit_errors,
        circuit_ignore: the circuit breaker the task's jobs share with every task naming
        it; see ``circuits.py``.
    retention: how long this task's ended jobs are kept before the cleanup removes them:
        a ``timedelta`` or a number of days for every ended status, or a mapping of
        ``"completed"``/``"failed"``/``"cancelled"`` to those (``None``: kept forever; a
        status not named keeps the app's default); see ``core/cleanup.py``.
    deadline: a ``timedelta`` or seconds: a job of the task not started that long after its
        enqueue ends ``cancelled`` (``DeadlineExceeded``); a call's ``_deadline`` wins
        (``deadlines.py``).
    validator: a pydantic model class (``model_validate`` of the named arguments) or a
        callable receiving the named arguments as one dict (``validator(arguments)``,
        the same dict pydantic gets) that raises to refuse them; a callable that cannot
        take exactly one positional argument is refused at decoration.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .calls import CallShape, Show, check_template, plain_repr
from .circuits import CIRCUIT_OPTIONS, circuit_rule
from .cleanup import task_retention
from .conversions import BOUNDS
from .deadlines import task_deadline
from .description import HighestPriority, Route, Send, TaskDescription, any_priority
from .errors import InvalidTaskOption
from .keys import KEY_OPTIONS, KeyRule, key_rule
from .limits import LIMIT_OPTIONS, Limits, limits_of
from .redact import short_repr
from .retry_policy import RETRY_OPTIONS, RetryPolicy, declared, retry_policy
from .validation import Bound, check_name, check_number

#: The class attributes of ``TrackedTask`` that are tracked options.
TRACKED_OPTIONS = (
    "job_type",
    "tracked_queue",
    "tracked_priority",
    "max_attempts",
    "backoff_ms",
    "idempotency_key",
    "validator",
    "retention",
    "retry_semantics",
    "deadline",
    *KEY_OPTIONS,
    *LIMIT_OPTIONS,
    *CIRCUIT_OPTIONS,
)


def _unwrap(value: Any) -> Any:
    return value.__func__ if isinstance(value, staticmethod | classmethod) else value


#: The longest delay a retry option may ask for (as ``tracked_max_backoff_ms``), seconds.
_MAX_DELAY_S = BOUNDS["max_backoff_ms"].high / 1000
#: The numeric options' ranges: an integer option's (``True``: an integer) and Celery's
#: options in seconds (``retry_backoff=True`` means 1 s and is accepted).
NUMERIC_OPTIONS: dict[str, tuple[Bound, bool, str]] = {
    "max_attempts": (BOUNDS["default_attempts"], True, ""),
    "backoff_ms": (BOUNDS["default_backoff_ms"], True, " (milliseconds)"),
    "concurrency_limit": (BOUNDS["concurrency_limit"], True, ""),
    "priority": (Bound(0, 255), True, " (the broker's range is checked at enqueue)"),
    "tracked_priority": (Bound(0, 255), True, " (the broker's range is checked at enqueue)"),
    "max_retries": (Bound(0, BOUNDS["default_attempts"].high - 1), True, ""),
    "retry_backoff": (Bound(0, _MAX_DELAY_S), False, " (seconds, or True)"),
    "retry_backoff_max": (Bound(0, _MAX_DELAY_S), False, " (seconds)"),
    "default_retry_delay": (Bound(0, _MAX_DELAY_S), False, " (seconds)"),
}


def _numbers(options: Mapping[str, Any]) -> None:
    for name, (bound, integer, unit) in NUMERIC_OPTIONS.items():
        value = _unwrap(options.get(name))
        if value is not None and not (name == "retry_backoff" and isinstance(value, bool)):
            check_number(name, value, bound, integer, unit)
    rate = _unwrap(options.get("rate_limit_global"))
    if isinstance(rate, tuple | list) and len(rate) == 2:
        try:
            check_number("rate_limit_global", rate[1], BOUNDS["rate_limit_ms"], True)
        except InvalidTaskOption as exc:
            raise InvalidTaskOption(
                "rate_limit_global",
                f"(name, interval_ms): the interval {exc.reason}, in {short_repr(rate)}",
            ) from None


def _key(name: str, value: Any) -> None:
    check_key_template(value)


def check_key_template(template: Any) -> None:
    """A task's ``idempotency_key`` template may only name the call's arguments
    (``"ocr:{document_id}"``, conversions and format specs allowed): attribute or index
    access (``{doc.id}``, ``{ids[0]}``) and positional fields (``{}``, ``{0}``) are refused,
    so a key never depends on more than the arguments' values.

    Raises:
        InvalidTaskOption: the template is malformed or uses anything but argument names.
    """
    template = _unwrap(template)
    if template is not None:
        check_template(template, "idempotency_key")


def _validator(name: str, value: Any) -> None:
    """A pydantic model class, or a callable taking the named arguments as ONE dict."""
    if inspect.isclass(value):
        if not hasattr(value, "model_validate"):
            raise InvalidTaskOption(name, f"a class must be a pydantic model, got {value!r}")
        return
    if not callable(value):
        raise InvalidTaskOption(
            name, f"must be a pydantic model class or a callable, got {value!r}"
        )
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # no signature to read (some builtins): trusted
        return
    try:
        signature.bind({})
    except TypeError:
        raise InvalidTaskOption(
            name,
            f"a callable receives the named arguments as one dict (validator(arguments)), "
            f"but {value!r} takes {signature}: write it as def check(arguments: dict) -> None",
        ) from None


def _retention(name: str, value: Any) -> None:
    task_retention(value)


def _deadline(name: str, value: Any) -> None:
    task_deadline(value)


_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "job_type": check_name,
    "tracked_queue": check_name,
    "idempotency_key": _key,
    "validator": _validator,
    "retention": _retention,
    "deadline": _deadline,
}


def check_task_options(options: Mapping[str, Any]) -> None:
    """Refuse a bad tracked option among ``options`` (a class ``__dict__`` or the keywords
    of ``tracked_task``); None means "the default" and is always accepted.

    Raises:
        InvalidTaskOption: names the option and what it must be.
    """
    for name, check in _CHECKS.items():
        value = _unwrap(options.get(name))
        if value is not None:
            check(name, value)
    _numbers(options)
    if _unwrap(options.get("circuit")) is not None:
        circuit_rule({n: _unwrap(options.get(n)) for n in CIRCUIT_OPTIONS})
    if "base" in options:  # the decorator's keywords: the base class declares the rest
        base = options["base"]
        key_rule({n: _unwrap(options.get(n, getattr(base, n, None))) for n in KEY_OPTIONS})
        limits_of({n: _unwrap(options.get(n, getattr(base, n, None))) for n in LIMIT_OPTIONS})
    retry_policy(options)


def check_task_class(cls: type, base: type) -> tuple[RetryPolicy, KeyRule]:
    """Check the options ``cls`` declares and return its retry policy, read from the
    classes between ``cls`` and ``base``, and its key rule (the nearest declaration wins).

    Raises:
        InvalidTaskOption: a bad or contradictory option.
    """
    check_task_options(cls.__dict__)
    classes = tuple(k for k in cls.__mro__ if issubclass(k, base) and k is not base)
    keys = key_rule({name: _unwrap(getattr(cls, name, None)) for name in KEY_OPTIONS})
    return retry_policy(declared(classes, RETRY_OPTIONS)), keys


def check_task_limits(cls: type) -> Limits:
    """The rate and concurrency limits ``cls`` declares (the nearest declaration wins).

    Raises:
        InvalidTaskOption: a bad limit (``limits.py``).
    """
    return limits_of({name: _unwrap(getattr(cls, name, None)) for name in LIMIT_OPTIONS})


def describe(
    cls: type,
    name: str,
    run: Callable[..., Any],
    framework: tuple[Route, Send],
    checked: tuple[RetryPolicy, KeyRule, Limits],
    show: Show = plain_repr,
    highest_priority: HighestPriority | None = None,
) -> TaskDescription:
    """The description of the task class ``cls``, registered as ``name`` with the body
    ``run``: its tracked options as declared (the nearest class's), ``checked`` (its retry
    policy, key rule and limits) when the class was made; ``framework``: Celery's routing
    and publish (``route``, ``send``); ``show``: its ``argsrepr`` text (Celery's);
    ``highest_priority``: the broker's priority range per queue (Celery's broker)."""

    def static(attr: str) -> Any:
        return _unwrap(inspect.getattr_static(cls, attr, None))

    retry, keys, limits = checked
    tracked_queue = static("tracked_queue")
    return TaskDescription(
        name=name,
        job_type=str(static("job_type") or name),
        shape=CallShape(run, show, strict=getattr(cls, "typing", None) is not False),
        route=framework[0],
        send=framework[1],
        retry=retry,
        keys=keys,
        limits=limits,
        validator=static("validator"),
        idempotency_key=static("idempotency_key"),
        retention=static("retention"),
        static_queue=tracked_queue or static("queue"),
        pins_queue=bool(tracked_queue),
        priority=static("tracked_priority")
        if static("tracked_priority") is not None
        else static("priority"),
        highest_priority=highest_priority or any_priority,
        deadline_s=task_deadline(static("deadline")),
        circuit=circuit_rule({n: static(n) for n in CIRCUIT_OPTIONS}),
    )
