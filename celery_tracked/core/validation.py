"""Every check of a value given by the user: the one home of validation.

Pure: no I/O, and nothing of the package but :mod:`~celery_tracked.errors` and
:mod:`~celery_tracked.redact` (for safe echoes). Each check raises the typed error of
where the value was given, naming it:

- task options, at declaration: ``InvalidTaskOption`` (:func:`check_number`,
  :func:`check_name`, :func:`delay_ms`, :func:`window_seconds`);
- settings: ``ConfigurationError`` (:class:`Bound`, shared with the options; the
  converters of ``conversions.py`` use :func:`within`);
- an enqueue's arguments and options, a job id: ``InvalidPayload`` or ``TypeError``
  (:func:`check_text`, :func:`check_job_id`, :func:`as_job_id`, :func:`positive`,
  :func:`check_options`);
- ``Tracker.jobs``/bulk actions: ``InvalidFilter`` (:func:`check_filter_text`,
  :func:`check_time`, :func:`check_limit`);
- ``set_progress``: ``InvalidProgress`` (:func:`check_progress`).

Numbers are real numbers but never booleans; NaN and infinities are refused wherever a
range is checked.
"""

from __future__ import annotations

import math
import numbers
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from .errors import (
    InvalidFilter,
    InvalidPayload,
    InvalidPriority,
    InvalidProgress,
    InvalidTaskOption,
)
from .redact import short_repr

#: The largest value of an ``Integer`` column on every backend.
MAX_INT = 2**31 - 1
#: The widest span in seconds a date is computed with (a ``countdown``, a key's window):
#: beyond it a date would overflow.
MAX_SECONDS = float(MAX_INT)
#: The longest progress stage.
MAX_STAGE_CHARS = 200


# -- numbers ----------------------------------------------------------------------------


def is_number(value: Any) -> bool:
    """A real number, not a boolean."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (not a number, NaN, infinite, too large)."""
    if not is_number(value):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) else None


class Bound(NamedTuple):
    """The range of a numeric setting or option: ``low..high``, and 0 too when ``zero``
    says what it means."""

    low: float
    high: float
    zero: str = ""

    def describe(self, integer: bool) -> str:
        kind = "an integer" if integer else "a number"
        text = f"{kind} from {_plain(self.low)} to {_plain(self.high)}"
        return f"{text}, or 0 ({self.zero})" if self.zero else text


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def within(number: float, bound: Bound) -> bool:
    """Is ``number`` (an int or a float) in ``bound``: finite and in range, or 0 when the
    bound allows it? A huge int has no float: it is compared as it is."""
    if bound.zero and number == 0:
        return True
    finite_ = isinstance(number, int) or math.isfinite(number)
    return finite_ and bound.low <= number <= bound.high


# -- task options (InvalidTaskOption) ---------------------------------------------------


def check_number(name: str, value: Any, bound: Bound, integer: bool, unit: str = "") -> None:
    """Refuse a numeric option outside ``bound`` (NaN, infinities and booleans included).

    Raises:
        InvalidTaskOption: names the option and its range.
    """
    kinds = int if integer else (int, float)
    ok = not isinstance(value, bool) and isinstance(value, kinds) and within(value, bound)
    if not ok:
        raise InvalidTaskOption(
            name, f"must be {bound.describe(integer)}{unit}, got {short_repr(value)}"
        )


def check_name(name: str, value: Any) -> None:
    """A non-empty string option (``job_type``; ``tracked_queue``: a string or a
    ``kombu.Queue``, by its name)."""
    text = getattr(value, "name", value) if name == "tracked_queue" else value
    if not isinstance(text, str) or not text.strip():
        raise InvalidTaskOption(name, f"must be a non-empty string, got {value!r}")


def delay_ms(name: str, value: Any, allow_bool: bool = False) -> int:
    """A Celery retry option in seconds (a whole number, or an ms-exact float) as
    milliseconds."""
    if isinstance(value, bool) and not allow_bool:
        raise InvalidTaskOption(name, f"must be a number of seconds, got {value!r}")
    if not isinstance(value, int | float) or value < 0:
        raise InvalidTaskOption(name, f"must be a number of seconds >= 0, got {value!r}")
    return int(value * 1000)


def window_seconds(name: str, value: Any, positive: bool) -> float:
    """A key's window in seconds (``throttle_s`` > 0, ``debounce_s`` >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidTaskOption(name, f"must be a number of seconds, got {value!r}")
    if value > MAX_SECONDS:  # a date that far away cannot be computed
        raise InvalidTaskOption(name, f"must be at most {MAX_SECONDS:.0f} seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise InvalidTaskOption(
            name, f"must be {'> 0' if positive else '>= 0'} seconds, got {value!r}"
        )
    return float(value)


# -- an enqueue (InvalidPayload, TypeError) ---------------------------------------------


def check_text(value: Any, name: str, limit: int) -> str:
    """``value`` as text a column of width ``limit`` can hold, else ``InvalidPayload``."""
    text = str(value)
    if not 1 <= len(text) <= limit:
        raise InvalidPayload(f"{name} must be 1-{limit} characters, got {len(text)}")
    _valid_text(text, name)
    return text


def _valid_text(text: str, name: str) -> None:
    """``InvalidPayload`` for a text no column can hold: a NUL byte, a lone surrogate."""
    if "\x00" in text:
        raise InvalidPayload(f"{name} must not contain a NUL byte")
    at = unencodable_at(text)
    if at is not None:
        raise InvalidPayload(
            f"{name} is not valid Unicode (a lone surrogate at character {at + 1} of {len(text)})"
        )


def check_job_id(task_id: Any) -> str | None:
    """A caller-chosen job id (``task_id``, a ``str`` or ``uuid.UUID``) must fit the id
    column."""
    return None if task_id is None else check_text(task_id, "task_id", 36)


def as_job_id(value: Any, name: str = "job_id") -> str:
    """A job id given to a read or an operation: a ``str`` or a ``uuid.UUID``.

    Raises:
        TypeError: any other type (naming the argument).
        InvalidPayload: a string no job id can be (a NUL byte, a lone surrogate).
    """
    if isinstance(value, uuid.UUID):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or uuid.UUID, not {type(value).__name__}")
    _valid_text(value, name)
    return value


def positive(value: Any, name: str) -> int | None:
    """``value`` if it is a positive integer an ``Integer`` column holds (or None); else
    ``InvalidPayload``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise InvalidPayload(
            f"{name} must be a positive integer, got {value!r} (at most {MAX_INT})"
        )
    return value


def check_options(options: Mapping[str, Any]) -> None:
    """Celery's scheduling options must be usable before anything is created: Celery
    would accept some bad ones and fail later, in the worker or the publish.

    Raises:
        TypeError: ``countdown``, ``eta`` or ``expires`` of the wrong type.
        InvalidPriority: a ``priority`` that is not an int from 0 to 255.
        InvalidPayload: a value of the right type no message can carry.
    """
    _seconds(options.get("countdown"), "countdown")
    for name in ("eta", "expires"):
        value = options.get(name)
        if name == "expires" and is_number(value):
            _seconds(value, name)
        elif isinstance(value, str):
            try:
                datetime.fromisoformat(value)
            except ValueError:
                raise InvalidPayload(f"{name} must be an ISO 8601 date, got {value!r}") from None
        elif value is not None and not isinstance(value, datetime):
            kinds = "a datetime" + (", a number" if name == "expires" else "")
            raise TypeError(f"{name} must be {kinds} or an ISO 8601 string, not {type(value)}")
    priority = options.get("priority")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 255
    ):
        raise InvalidPriority(priority, 255)  # one byte on any broker; the queue's: later


def _seconds(value: Any, name: str) -> None:
    if value is None:
        return
    if not is_number(value):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not -MAX_SECONDS <= float(value) <= MAX_SECONDS:  # also refuses NaN
        raise InvalidPayload(
            f"{name} must be a number of seconds from -{MAX_INT} to {MAX_INT} "
            f"(about 68 years), got {value!r}"
        )


# -- finding jobs (InvalidFilter) -------------------------------------------------------


def check_filter_text(name: str, value: Any, limit: int) -> None:
    """A text filter: None, or a non-empty string of at most ``limit`` characters."""
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise InvalidFilter(f"{name}: expected a non-empty string, got {value!r}")
    if "\x00" in value or len(value) > limit:
        raise InvalidFilter(f"{name}: at most {limit} characters, without NUL")
    at = unencodable_at(value)
    if at is not None:
        raise InvalidFilter(
            f"{name}: not valid Unicode (a lone surrogate at character {at + 1} of {len(value)})"
        )


def unencodable_at(text: str) -> int | None:
    """The index of the first character of ``text`` UTF-8 cannot encode (a lone
    surrogate, e.g. from ``os.fsdecode`` of bytes that are not UTF-8), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_time(name: str, value: Any) -> None:
    """A time filter: None, or an aware datetime."""
    if value is None:
        return
    if not isinstance(value, datetime):
        raise InvalidFilter(f"{name}: expected a datetime or a timedelta, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidFilter(f"{name}: a naive datetime is ambiguous; give an aware one (UTC)")


def check_now(now: Any) -> Any:
    """A maintenance pass's ``now=`` (``Tracker.relay``, ``schedule``, ``reap``,
    ``cleanup``, ``probe``, ``run_maintenance``): None or an aware datetime, returned as given."""
    if now is not None and not isinstance(now, datetime):
        raise InvalidFilter(f"now: expected an aware datetime (or None), got {now!r}")
    if now is not None and now.utcoffset() is None:
        raise InvalidFilter(f"now: a naive datetime is ambiguous; give an aware one (UTC): {now!r}")
    return now


def check_limit(limit: Any, maximum: int | None, name: str = "limit") -> int:
    """A page size or a bulk action's limit: an int from 1 to ``maximum``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidFilter(f"{name}: expected a positive int, got {limit!r}")
    if maximum is not None and limit > maximum:
        raise InvalidFilter(f"{name}: at most {maximum}, got {limit}")
    return limit


# -- progress (InvalidProgress) ---------------------------------------------------------


def check_progress(percent: object, stage: object = None) -> tuple[int, str | None]:
    """``(percent rounded down, stage)``, or ``InvalidProgress``."""
    if not is_number(percent):
        raise InvalidProgress(f"progress must be a number from 0 to 100, got {percent!r}")
    number = finite(percent)
    if number is None or not 0 <= number <= 100:
        raise InvalidProgress(f"progress must be from 0 to 100, got {percent!r}")
    if stage is not None:
        if not isinstance(stage, str):
            raise InvalidProgress(f"stage must be a string, got {type(stage).__name__}")
        if len(stage) > MAX_STAGE_CHARS or "\x00" in stage:
            raise InvalidProgress(
                f"stage must be at most {MAX_STAGE_CHARS} characters without NUL (got {len(stage)})"
            )
    return math.floor(number), stage
