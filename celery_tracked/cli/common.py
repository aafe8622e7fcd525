"""What every ``celery tracked`` command shares: exit codes, errors as one line, the
app's tracker, ``--json``, and the job filters as options.

Exit codes (docs/operations.md, "The CLI"):

- 0: done (a listing may be empty; a bulk action refused nothing);
- 1: not found (no job with this id, no pipeline with this correlation id);
- 2: usage (click's own: an unknown option, a bad value, a bad filter or cursor);
- 3: refused (the job is not in a status the action applies to, or a bulk action refused
  at least one job; the report says which and why);
- 4: failed (the database, Redis or the broker failed, or a setting is invalid).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import ChainMap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar, cast

import click

from ..adapter.celery_tracker import Tracker
from ..core.conversions import MEMORY_URL
from ..core.errors import InvalidFilter, InvalidPause, JobNotFound, TrackedError
from ..core.finder import Filters
from ..core.printable import visible
from ..core.redact import first_line
from ..core.settings import Settings
from .render import Style

EXIT_NOT_FOUND = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_FAILED = 4

F = TypeVar("F", bound=Callable[..., Any])


class _Shown(click.ClickException):
    """An error whose message (often holding a job id, a value given or job data) is
    printed with its control characters visibly escaped, whoever raised it."""

    def format_message(self) -> str:
        return visible(self.message)


class NotFound(_Shown):
    exit_code = EXIT_NOT_FOUND


class Refused(_Shown):
    exit_code = EXIT_REFUSED


class Failed(_Shown):
    exit_code = EXIT_FAILED


@contextmanager
def friendly(action: str) -> Iterator[None]:
    """Errors as one masked line and their exit code, never a driver traceback."""
    try:
        yield
    except click.ClickException:
        raise
    except (InvalidFilter, InvalidPause) as exc:
        raise click.UsageError(visible(str(exc))) from None
    except JobNotFound as exc:
        raise NotFound(visible(str(exc))) from None
    except Exception as exc:
        detail = visible(first_line(str(exc), type(exc).__name__))
        raise Failed(f"{action} failed: {detail}") from None


def tracker_of(ctx: click.Context) -> Tracker:
    try:
        return Tracker.for_app(ctx.obj.app)
    except TrackedError as exc:
        raise Failed(str(exc)) from None


def reader_of(ctx: click.Context) -> Tracker:
    """The tracker of a read-only command (``jobs``, ``show``, ``stats``, ``pipeline``):
    the app's, unless no ``tracked_redis_url`` is set (an ops host with access to the
    database only): then one of its own, reading the database alone (the in-process guard
    in place of Redis, which a read never uses), closed with the command."""
    app = ctx.obj.app
    given = app.conf.get("tracked_redis_url") or os.environ.get("CELERY_TRACKED_REDIS_URL")
    if given:
        return tracker_of(ctx)
    try:
        settings = Settings.from_conf(ChainMap({"tracked_redis_url": MEMORY_URL}, app.conf))
        reader = Tracker(app, settings)
    except TrackedError as exc:
        raise Failed(str(exc)) from None
    ctx.call_on_close(reader.close)
    return reader


def style() -> Style:
    return Style.for_stream(sys.stdout)


def emit_json(value: Any) -> None:
    """``value`` as JSON on stdout (stable keys, sorted)."""
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def json_option(func: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (stable keys) instead of a table."
    )(func)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(
    value: str | None, now: datetime | None = None, ahead: bool = False
) -> datetime | timedelta | None:
    """An option's time: a duration ago ("90s", "15m", "2h", "3d", "1w"; ``ahead``: from
    now, "in 2h" too) or an ISO 8601 date or datetime (without a zone: UTC).

    Raises:
        click.BadParameter: neither.
    """
    if value is None:
        return None
    text = check_text("time", value).strip()
    when_word = "from now" if ahead else "ago"
    spoken = text.lower()
    if ahead and spoken.startswith("in "):
        spoken = spoken[3:].strip()
    match = _DURATION.match(spoken)
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        if seconds > MAX_AGO_S:
            raise click.BadParameter(
                f"{value!r}: a duration of at most {MAX_AGO_S // _UNITS['w']}w "
                f"(about {MAX_AGO_S // (365 * 86400)} years) {when_word}"
            )
        return timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{visible(repr(value))}: give a duration {when_word} (90s, 15m, 2h, 3d, 1w) or "
            "an ISO 8601 date/time (no zone: UTC)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


#: The longest duration ago a time option takes: 1,000 years (further back than any job,
#: and far from the first date a datetime can hold).
MAX_AGO_S = 1000 * 365 * 86400


def check_text(name: str, value: str) -> str:
    """``value`` as given, if it is text a database can store (a non-UTF-8 argument reaches
    Python as lone surrogates, ``\\udcff``).

    Raises:
        click.BadParameter: it is not valid UTF-8.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = value.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        raise click.BadParameter(f"{name}: {shown!r} is not valid UTF-8") from None
    return value


#: How a due bound is given (``--due-after``/``--due-before``).
_AHEAD = (
    "a duration from now on the database's clock (30m, 2h, 3d; also 'in 2h') or an ISO "
    "8601 date/time (2026-12-01T09:00, no zone: UTC). Jobs without a due time never match."
)
_FILTER_OPTIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("--status", "status", {"multiple": True, "help": "A status (repeat, or a,b for several)."}),
    ("--queue", "queue", {"help": "Queue name."}),
    ("--job-type", "job_type", {"help": "Job type."}),
    ("--task", "task_name", {"help": "Celery task name."}),
    ("--correlation-id", "correlation_id", {"help": "Correlation id (a pipeline)."}),
    ("--owner", "owner_id", {"help": "Owner id."}),
    ("--error-type", "error_type", {"help": "Error type (e.g. TimeoutError)."}),
    ("--priority", "priority", {"type": int, "help": "Priority (the message's, 0-255)."}),
    ("--created-after", "created_after", {"help": "Created at or after: 2h, 3d, or ISO."}),
    ("--created-before", "created_before", {"help": "Created before: 2h, 3d, or ISO."}),
    ("--finished-after", "finished_after", {"help": "Ended at or after: 1h, or ISO."}),
    ("--finished-before", "finished_before", {"help": "Ended before: 1h, or ISO."}),
    (
        "--due-after",
        "due_after",
        {"help": f"Due (countdown/eta) at or after: {_AHEAD}"},
    ),
    ("--due-before", "due_before", {"help": f"Due (countdown/eta) before: {_AHEAD}"}),
]


def filter_options(func: F) -> F:
    """The filters of ``Tracker.jobs`` as options."""
    for flag, name, extra in reversed(_FILTER_OPTIONS):
        func = click.option(flag, name, metavar="VALUE", **extra)(func)
    return func


def filters_from(options: dict[str, Any]) -> Filters:
    """``Tracker.jobs``' keywords from the filter options given (the others left out)."""
    out: dict[str, Any] = {}
    given_statuses = [check_text("--status", given) for given in options.get("status") or ()]
    statuses = [s for given in given_statuses for s in given.split(",") if s]
    if statuses:
        out["status"] = statuses
    for flag, name, _ in _FILTER_OPTIONS[1:]:
        value = options.get(name)
        if value is None:
            continue
        if name == "priority":
            out[name] = value
        elif name.endswith(("_after", "_before")):
            try:
                out[name] = parse_time(value, ahead=name.startswith("due_"))
            except click.BadParameter as exc:
                raise click.BadParameter(visible(exc.message), param_hint=flag) from None
        else:
            out[name] = check_text(flag, value)
    return cast(Filters, out)
