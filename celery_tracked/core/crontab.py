"""A crontab string checked the way Celery's ``crontab.from_string`` reads it, with no
Celery here (the core imports none): five fields (minute, hour, day of month, month, day
of week), each ``*``, a value, a range (``a-b``, wrapping allowed), a step (``*/n``,
``a-b/n``) or a comma-separated list of those; weekday and month names accepted. The
Celery side still builds the schedule with Celery's own parser; this is the early check
of ``tracked_cleanup_schedule`` (``tests/unit/test_crontab.py`` compares both; a
malformed range such as ``1-2-3``, which Celery reads leniently, is refused here).
"""

from __future__ import annotations

import re

_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
#: (lowest, highest, names) per field, in the string's order.
_FIELDS: tuple[tuple[int, int, tuple[str, ...]], ...] = (
    (0, 59, ()),
    (0, 23, ()),
    (1, 31, ()),
    (1, 12, _MONTHS),
    (0, 6, _WEEKDAYS),
)
_PART = re.compile(r"^(?P<range>\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>\d+))?$")


def check_crontab(text: str) -> None:
    """Refuse what Celery's crontab parser refuses.

    Raises:
        ValueError: why (the field count, a value out of range, a zero step, a bad name).
    """
    fields = text.split()
    if len(fields) != len(_FIELDS):
        raise ValueError(f"expected 5 fields (minute hour day month weekday), got {len(fields)}")
    for field, (low, high, names) in zip(fields, _FIELDS, strict=True):
        for part in field.split(","):
            _check_part(part, low, high, names)


def _check_part(part: str, low: int, high: int, names: tuple[str, ...]) -> None:
    match = _PART.match(part)
    if match is None:
        raise ValueError(f"invalid crontab field part {part!r}")
    if match["step"] is not None and int(match["step"]) == 0:
        raise ValueError("slice step cannot be zero")
    if match["range"] == "*":
        return
    ends = match["range"].split("-")
    numbers = [_number(end, names) for end in ends]
    if min(numbers) < low:
        raise ValueError(f"Invalid beginning range: {min(numbers)} < {low}.")
    if max(numbers) > high:
        raise ValueError(f"Invalid end range: {max(numbers)} > {high}.")


def _number(text: str, names: tuple[str, ...]) -> int:
    if text.isdigit():
        return int(text)
    name = text.lower()
    for number, known in enumerate(names):
        if name == known or (len(name) > 3 and _full(known, name)):
            return number + (1 if names is _MONTHS else 0)
    raise ValueError(f"Invalid literal {text!r}")


def _full(short: str, name: str) -> bool:
    """``name`` is the full English name of the abbreviation ``short``."""
    full = {
        "sun": "sunday", "mon": "monday", "tue": "tuesday", "wed": "wednesday",
        "thu": "thursday", "fri": "friday", "sat": "saturday", "jan": "january",
        "feb": "february", "mar": "march", "apr": "april", "jun": "june", "jul": "july",
        "aug": "august", "sep": "september", "oct": "october", "nov": "november",
        "dec": "december",
    }  # fmt: skip
    return full.get(short) == name
