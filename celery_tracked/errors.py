"""Public exceptions and safe error summaries.

Every exception celery-tracked raises derives from :class:`TrackedError`, so callers
never catch ``psycopg``, ``sqlalchemy`` or ``redis`` exceptions::

    TrackedError
    ├── ConfigurationError        a setting is missing or invalid (names the setting)
    ├── InvalidPayload            bad input at enqueue; nothing was created
    │   ├── PayloadNotSerializable
    │   └── PayloadTooLarge
    ├── EnqueueError              Redis, database or broker failed at enqueue (retryable)
    ├── StoreError                the tracking database failed outside enqueue
    ├── JobNotFound
    ├── WaitTimeout               (also a ``TimeoutError``)
    ├── JobFailed                 ``Tracker.wait`` on a failed or cancelled job
    └── Unrecoverable             raised by a task body: fail now, no further attempts
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

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


class StoreError(TrackedError):
    """The tracking database failed."""


class JobNotFound(TrackedError, LookupError):
    """No job has this id."""


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
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<creds>\S+)@")


def mask_url(text: str) -> str:
    """Replace the user-info part of every URL in ``text`` by ``***``."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def _key_value_pattern(keys: Iterable[str]) -> re.Pattern[str] | None:
    words = sorted({re.escape(k) for k in keys if k}, key=len, reverse=True)
    if not words:
        return None
    return re.compile(
        r"(?P<key>[\w\-]*(?:" + "|".join(words) + r")[\w\-]*)"
        r"(?P<sep>['\"]?\s*[:=]\s*['\"]?)(?P<value>[^\s'\",;&}]+)",
        re.IGNORECASE,
    )


def mask_secrets(text: str, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> str:
    """Mask URL credentials, ``key=value`` pairs under secret keys, and known secret values."""
    text = mask_url(text)
    for value in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(value, MASK)
    pattern = _key_value_pattern(keys)
    if pattern is not None:
        text = pattern.sub(lambda m: f"{m.group('key')}{m.group('sep')}{MASK}", text)
    return text


def first_line(text: str, fallback: str = "") -> str:
    """The first non-empty line of ``text`` with URL credentials masked (``fallback`` if none)."""
    lines = mask_url(text).strip().splitlines()
    return lines[0] if lines else fallback


def summarize(exc: BaseException, secrets: Iterable[str] = (), keys: Iterable[str] = ()) -> str:
    """A safe one-line summary: the first line of the message, secrets masked, no traceback."""
    summary = mask_secrets(first_line(str(exc)), secrets, keys)
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


def mask_exception(exc: BaseException, secrets: Sequence[str], keys: Sequence[str]) -> None:
    """Mask secrets in the text of ``exc`` and of its whole chain (``__cause__``,
    ``__context__``), in place, so Celery's logs, events and result backend never show
    them. Text copies some exceptions keep (Celery's ``Retry.excs``/``message``) too."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        with contextlib.suppress(AttributeError, TypeError):
            current.args = tuple(
                mask_secrets(a, secrets, keys) if isinstance(a, str) else a for a in current.args
            )
        for attr in ("excs", "message"):
            text = getattr(current, attr, None)
            if isinstance(text, str):
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(current, attr, mask_secrets(text, secrets, keys))
        linked = (getattr(current, "exc", None), current.__cause__, current.__context__)
        pending.extend(e for e in linked if isinstance(e, BaseException))
