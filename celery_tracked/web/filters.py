"""The job list's filters as query parameters, and back: a listing's URL is shareable.

The parameters are ``Tracker.jobs``' keywords (``status`` repeated for several); times
are a duration ago (``90s``, ``15m``, ``2h``, ``3d``, ``1w``; for the due bounds: from now)
or an ISO 8601 date or datetime (without a zone: UTC).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import ImmutableMultiDict

from ..core.errors import InvalidFilter
from ..core.finder import Filters
from ..core.jobs import JobStatus

TEXT = ("queue", "job_type", "task_name", "correlation_id", "owner_id", "error_type", "tenant")
TIMES = (
    "created_after",
    "created_before",
    "finished_after",
    "finished_before",
    "due_after",
    "due_before",
)
#: every filter parameter, in the form's order
NAMES = ("status", *TEXT, "priority", *TIMES)
STATUSES = tuple(s.value for s in JobStatus)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_MAX_AGO_S = 1000 * 365 * 86400


def parse_time(name: str, text: str) -> datetime | timedelta:
    """A duration (``2h``) or an ISO date/time; else ``InvalidFilter``."""
    text = text.strip()
    match = _DURATION.match(text.lower())
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        if seconds > _MAX_AGO_S:
            raise InvalidFilter(f"{name}: a duration of at most 1000 years")
        return timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidFilter(f"{name}: a duration (90s, 15m, 2h, 3d, 1w) or an ISO date") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def given(
    query: ImmutableMultiDict[str, Any] | Mapping[str, Any], also: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The filter parameters present and not blank, as text (statuses a list).

    Raises:
        InvalidFilter: a parameter that is neither a filter nor one of ``also`` (a
            misspelt filter ignored would list, and a bulk action act on, every job).
    """
    unknown = sorted(set(query.keys()) - set(NAMES) - set(also))
    if unknown:
        raise InvalidFilter(f"{unknown[0]}: not a filter (the filters: {', '.join(NAMES)})")
    out: dict[str, Any] = {}
    getlist = getattr(query, "getlist", None)
    statuses = getlist("status") if getlist else [query.get("status")]
    chosen = [s for raw in statuses if raw for s in str(raw).split(",") if s.strip()]
    if chosen:
        out["status"] = chosen
    for name in NAMES[1:]:
        value = query.get(name)
        if value is not None and str(value).strip():
            out[name] = str(value).strip()
    return out


def filters_of(shown: Mapping[str, Any]) -> Filters:
    """``Tracker.jobs``' keywords from :func:`given`'s values.

    Raises:
        InvalidFilter: a bad priority or time (the tracker checks the rest).
    """
    out: dict[str, Any] = {}
    for name, value in shown.items():
        if name == "priority":
            try:
                out[name] = int(value)
            except ValueError:
                raise InvalidFilter(f"priority: an integer, not {value!r}") from None
        elif name in TIMES:
            out[name] = parse_time(name, value)
        else:
            out[name] = value
    return out  # type: ignore[return-value]


def query_of(shown: Mapping[str, Any], **more: Any) -> str:
    """The query string of these filters (and ``more``: a cursor), for a shareable URL."""
    pairs: list[tuple[str, str]] = []
    for name, value in {**shown, **more}.items():
        if value is None:
            continue
        values = value if isinstance(value, list | tuple) else [value]
        pairs.extend((name, str(v)) for v in values)
    return urlencode(pairs)
