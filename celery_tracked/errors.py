"""Public exceptions and safe error summaries.

Every exception celery-tracked raises derives from :class:`TrackedError`, so callers
never catch ``psycopg``, ``sqlalchemy`` or ``redis`` exceptions::

    TrackedError
    ├── ConfigurationError        a setting is missing or invalid (names the setting)
    │   └── InvalidTaskOption     a task's tracked option is invalid (at decoration)
    ├── InvalidPayload            bad input at enqueue; nothing was created
    │   ├── PayloadNotSerializable
    │   └── PayloadTooLarge
    ├── EnqueueError              Redis, database or broker failed at enqueue (retryable)
    │   └── DuplicateInCanvas     a canvas member's idempotency key is taken (not retryable)
    ├── StoreError                the tracking database failed outside enqueue
    │   ├── Disconnected          (internal) its pooled connection was dead
    │   └── Refused               (internal) a constraint or a column refused a value
    ├── JobNotFound
    ├── InvalidFilter             ``Tracker.jobs``/bulk actions: a bad filter, limit or cursor
    ├── InvalidProgress           ``set_progress``/``log`` given a value it cannot record
    ├── WaitTimeout               (also a ``TimeoutError``)
    ├── JobFailed                 ``Tracker.wait`` on a failed or cancelled job
    └── Unrecoverable             raised by a task body: fail now, no further attempts

Internal, never raised to users: ``DuplicateJob`` (a store's insert met the job's id or
idempotency key; the enqueuer turns it into a duplicate result).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .jobs import Job

#: Longest error summary ever stored or logged.
MAX_SUMMARY_CHARS = 500
MASK = "***"


class TrackedError(Exception):
    """Root of every exception raised by celery-tracked."""


class ConfigurationError(TrackedError):
    """A setting is missing or invalid.

    Attributes:
        setting: the ``app.conf`` name of the offending setting.
    """

    def __init__(self, setting: str, reason: str) -> None:
        self.setting = setting
        self.reason = reason
        super().__init__(f"{setting}: {reason}")


class InvalidTaskOption(ConfigurationError, ValueError):
    """A tracked option of a task (``max_attempts``, ``backoff_ms``, ``job_type``,
    ``tracked_queue``/``queue``, ``idempotency_key``, ``validator``) is invalid: raised
    when the task is declared. ``setting`` names the option."""


class InvalidPayload(TrackedError, ValueError):
    """The task arguments were refused before anything was created."""


class PayloadNotSerializable(InvalidPayload, TypeError):
    """The arguments cannot be encoded as JSON."""


class PayloadTooLarge(InvalidPayload):
    """The JSON-encoded arguments exceed ``tracked_max_payload_bytes``."""


class EnqueueError(TrackedError):
    """Redis, the database or the broker failed during enqueue.

    Retryable: nothing was left behind (no row, no message, no guard key).
    """

    retryable = True


class DuplicateInCanvas(EnqueueError):
    """A signature sent as part of a canvas (``group``, ``chain``, ``chord``, a ``link``, a
    ``self.replace``) has the idempotency key (or task id) of an existing job.

    Outside a canvas such a call returns the existing job; inside one, Celery waits on the
    signature's own frozen task id, which would never get a message: the canvas would hang.
    Raised before this signature is published; members of a group or chord header sent
    before it were enqueued and run. Not retryable: the key stays taken.

    Attributes:
        job_id: the existing job holding the key.
        task_id: the frozen task id Celery gave the signature.
    """

    retryable = False

    def __init__(self, task_name: str, job_id: str, task_id: str) -> None:
        self.job_id = job_id
        self.task_id = task_id
        super().__init__(
            f"{task_name}: idempotency key already used by job {job_id}; inside a canvas "
            f"its signature (task id {task_id}) would never run, refused"
        )


class RetryRefused(TrackedError, ValueError):
    """``Tracker.retry`` cannot re-run this job as asked (nothing was changed): its stored
    arguments hold redacted values not passed again, values were given for arguments that
    were not redacted, or a newer job holds its idempotency key."""


class StoreError(TrackedError):
    """The tracking database failed."""


class Disconnected(StoreError):
    """The statement failed because its pooled connection was dead (now discarded)."""

    internal = True  # recorded as a StoreError


class Refused(StoreError):
    """The database refused a row for what it holds (a constraint), not for being down:
    sending it again cannot help."""

    internal = True  # recorded as a StoreError


class DuplicateJob(Exception):
    """Internal: the insert hit the unique key or the primary key."""


class InvalidProgress(TrackedError, ValueError):
    """``set_progress`` got a percent that is not a number from 0 to 100 (a bool, NaN), or
    a stage that is not a string of at most 200 characters without NUL; or ``log`` got an
    unknown level. Raised in the body, also outside a tracked run."""


class JobNotFound(TrackedError, LookupError):
    """No job has this id."""


class InvalidFilter(TrackedError, ValueError):
    """``Tracker.jobs``, ``retry_many`` or ``cancel_many`` got a filter it cannot apply (an
    unknown status, a naive datetime, an empty range, a bad limit) or a cursor it did not
    make. Nothing was read or changed."""


class WaitTimeout(TrackedError, TimeoutError):
    """``Tracker.wait`` gave up before the job reached a terminal status."""


class JobFailed(TrackedError):
    """The awaited job ended ``failed`` or ``cancelled``.

    Attributes:
        job: the job as it was read when the wait ended.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        detail = f"{job.error_type}: {job.error_message}" if job.error_type else job.status
        super().__init__(f"job {job.id} {job.status}: {detail}")


class Unrecoverable(TrackedError):
    """Raise from a task body to fail the job now, whatever attempts remain."""


# user-info runs to the last "@" of the URL token: passwords may hold "/" or "@"
#: A scheme starts where no scheme character precedes it and is read possessively, and the
#: user-info is at most 512 characters: linear in the text's length (a long run of letters
#: costs one pass, never a search from each of its characters).
_URL_CREDENTIALS = re.compile(
    r"(?<![a-zA-Z0-9+.\-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*+://)(?P<creds>\S{1,512})@"
)


def mask_url(text: str) -> str:
    """Replace the user-info part of every URL in ``text`` by ``***``."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def url_userinfo(text: str) -> list[str]:
    """The user-info part (``user:password``) of every URL in ``text``."""
    return [m.group("creds") for m in _URL_CREDENTIALS.finditer(text)]


#: ``key=value``, ``key: value``, ``"key": "value"`` (and ``Authorization: Bearer x``). The
#: key must start a word and every quantifier is possessive: linear in the text's length
#: (a long run of word characters costs one pass, never a backtracking search).
_PAIR = re.compile(
    r"(?<![\w\-])(?P<key>[\w\-]++)(?P<sep>['\"]?+\s*+[:=]\s*+['\"]?+)"
    r"(?P<value>(?:(?:bearer|basic|token|digest|negotiate)\s++(?=[^\s'\",;&}]))?+"
    r"[^\s'\",;&}]++)",
    re.IGNORECASE,
)


def _mask_pairs(text: str, keys: Sequence[str]) -> str:
    """``text`` with the value of every ``key=value`` pair under a secret key masked."""
    from .redact import NOT_SECRET_NAMES, is_secret_key, normalise_key  # redact imports us

    def mask(match: re.Match[str]) -> str:
        key = match.group("key")
        if normalise_key(key) in NOT_SECRET_NAMES or not is_secret_key(key, keys):
            return match.group(0)
        return f"{key}{match.group('sep')}{MASK}"

    return _PAIR.sub(mask, text)


def mask_secrets(text: str, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> str:
    """Mask URL credentials, ``key=value`` pairs under secret keys, and known secret values."""
    text = mask_url(text)
    for value in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(value, MASK)
    secret_keys = tuple(k for k in keys if k.strip("*"))
    return _mask_pairs(text, secret_keys) if secret_keys else text


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (a 400-digit number is not worth echoing
    whole in an error message)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def safe_text(value: object) -> str:
    """``str(value)``, or a placeholder naming its type when its ``__str__`` raises."""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def first_line(text: object, fallback: str = "") -> str:
    """The first non-empty line of ``text`` (an exception: its message, see
    :func:`safe_text`) with URL credentials masked (``fallback`` if none). Never raises."""
    lines = mask_url(safe_text(text)).strip().splitlines()
    return lines[0] if lines else fallback


def summarize(exc: BaseException, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> str:
    """A safe one-line summary: the first line of the message, secrets masked, no traceback.
    An exception whose ``__str__`` raises is summarised by its type. Never raises."""
    summary = mask_secrets(first_line(exc), secrets, keys)
    if len(summary) > MAX_SUMMARY_CHARS:
        summary = summary[: MAX_SUMMARY_CHARS - 1] + "…"
    return summary


def error_type(exc: BaseException) -> str:
    """The exception's class name, as stored in ``background_jobs.error_type`` (the first
    public class of its hierarchy: internal subclasses, named with a leading underscore or
    marked ``internal = True``, never leak their names)."""
    for cls in type(exc).__mro__:
        if not cls.__name__.startswith("_") and not cls.__dict__.get("internal", False):
            return cls.__name__
    return type(exc).__name__


def _masked(value: Any, secrets: Sequence[str], keys: Sequence[str]) -> Any:
    """``value`` (an exception argument or note) with secrets masked: strings by
    :func:`mask_secrets`, containers copied with values under secret keys redacted."""
    from .redact import redact  # redact imports this module

    if isinstance(value, str):
        return mask_secrets(value, secrets, keys)
    if isinstance(value, Mapping | list | tuple):
        cleaned = redact(value, keys)
        items = cleaned.items() if isinstance(cleaned, Mapping) else enumerate(cleaned)
        for k, v in list(items):
            cleaned[k] = _masked(v, secrets, keys)
        return tuple(cleaned) if isinstance(value, tuple) else cleaned
    return value


def _linked(exc: BaseException) -> list[BaseException]:
    """The exceptions ``exc`` shows with it: its chain, a ``Retry``'s cause, a group's
    members."""
    linked = [getattr(exc, "exc", None), exc.__cause__, exc.__context__]
    linked.extend(getattr(exc, "exceptions", None) or ())
    return [e for e in linked if isinstance(e, BaseException)]


def mask_exception(exc: BaseException, secrets: Sequence[str], keys: Sequence[str]) -> None:
    """Mask secrets in the text of ``exc`` and of everything shown with it (``__cause__``,
    ``__context__``, an ``ExceptionGroup``'s members, ``__notes__``), in place, so Celery's
    logs, events and result backend never show them: string arguments, containers among
    the arguments (values under secret keys redacted), and text copies some exceptions
    keep (Celery's ``Retry.excs``/``message``). Never raises."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        with contextlib.suppress(Exception):
            current.args = tuple(_masked(a, secrets, keys) for a in current.args)
        for attr in ("excs", "message", "__notes__"):
            text = getattr(current, attr, None)
            if isinstance(text, str | list):
                with contextlib.suppress(Exception):
                    setattr(current, attr, _masked(text, secrets, keys))
        pending.extend(_linked(current))
