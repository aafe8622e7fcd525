"""A body's progress and log lines: ``self.set_progress``, ``self.log`` and Celery's
``self.update_state(state="PROGRESS", ...)``.

While a body runs, the progress hook (``reports.py``) attaches the attempt's
:class:`ProgressSink` to the attempt (the job id, the claim that fences every write, the
call's secrets), retired when the body ends. ``TrackedTask``'s methods pass it here, taken
from the attempt of the request they are called from; outside a tracked run (a body
called directly, an untracked run, another task's body) they pass None: the functions
validate their arguments and do nothing else (``set_progress``/``log`` return False).

The decisions are pure and tested alone: the checks, the percent of Celery's
``PROGRESS`` meta, the text of a log line, and :class:`Coalescer` (which values to write:
the first at once, then at most one per interval, the newest always written last).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.errors import InvalidProgress
from ..core.redact import NO_KEYS, Redaction, safe_text
from ..core.validation import (
    MAX_STAGE_CHARS as MAX_STAGE_CHARS,  # the width of background_jobs.stage
)
from ..core.validation import check_progress, finite

#: Longest log line kept (longer ones end with "…").
MAX_LOG_CHARS = 1000
LEVELS = ("debug", "info", "warning", "error")
#: ``(percent, stage)``: a stage of None keeps the row's stage.
Value = tuple[int, str | None]


class ProgressSink(Protocol):
    """The running attempt's writer (``reporter.ProgressReporter``)."""

    def progress(self, percent: int, stage: str | None) -> None: ...

    def log(self, message: str, level: str) -> bool: ...

    def cancel_requested(self) -> bool: ...


# -- the public entry points (``TrackedTask`` delegates here) -------------------------


def set_progress(sink: ProgressSink | None, percent: float, stage: str | None = None) -> bool:
    """Record the running job's progress: ``percent`` (0-100, a fraction is rounded down)
    and, unless None, its ``stage`` (None keeps the current stage).

    Cheap in a loop: the first value is written at once, then at most one write per
    ``tracked_progress_interval_ms``; the newest value is always written, at the latest
    when the body ends (before its outcome). Fenced by the run's claim; a database error
    is logged, never raised into the body.

    Returns:
        True inside a tracked run (``sink`` given), False elsewhere (nothing recorded).

    Raises:
        InvalidProgress: ``percent`` is not a number from 0 to 100 (a bool, NaN), or
            ``stage`` is not a string of at most 200 characters without NUL.
    """
    value = check_progress(percent, stage)
    if sink is None:
        return False
    sink.progress(*value)
    return True


def log(sink: ProgressSink | None, message: object, level: str = "info") -> bool:
    """Append a line to the running job's history (``background_job_events``, event
    ``log``), secrets masked, at most 1000 characters; at most ``tracked_log_lines_per_job``
    lines per job, then one line saying the rest is dropped. Also logged (logger
    ``celery_tracked``) at ``level``. Never raises a database error into the body.

    Returns:
        True if the line was recorded; False outside a tracked run of this task, past the
        limit, or when the run no longer holds the job.

    Raises:
        InvalidProgress: ``level`` is not one of debug, info, warning, error.
    """
    if level not in LEVELS:
        raise InvalidProgress(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    if sink is None:
        return False
    return sink.log(safe_text(message), level)


def cancel_requested(sink: ProgressSink | None) -> bool:
    """True once the running job was asked to stop (``Tracker.cancel(job_id,
    running=True)``): the body should return (or raise) soon; the job then ends
    ``cancelled`` whatever it returns. Reads the job's row at most once a second per run
    (the first call reads it at once); False outside a tracked run of this task."""
    return False if sink is None else sink.cancel_requested()


def from_update_state(
    sink: ProgressSink | None,
    request_id: str | None,
    task_id: str | None = None,
    state: str | None = None,
    meta: Any = None,
    **_celery: Any,
) -> bool:
    """Celery's ``update_state(state="PROGRESS", meta=...)`` of the running task feeds
    :func:`set_progress` (see :func:`progress_of_meta`); other states and other tasks'
    ids are Celery's only. Never raises: odd meta is Celery's business, not an error here."""
    if state != "PROGRESS" or (task_id is not None and task_id != request_id):
        return False
    value = progress_of_meta(meta)
    if value is None or sink is None:
        return False
    sink.progress(*value)
    return True


# -- pure decisions -------------------------------------------------------------------


def progress_of_meta(meta: Any) -> Value | None:
    """The progress in Celery's ``PROGRESS`` meta: ``percent`` if it is a number, else
    ``current / total * 100`` (``total`` > 0), clamped to 0-100; ``stage`` if it is a
    string (cut to 200 characters, NUL removed). None when it holds no progress."""
    if not isinstance(meta, Mapping):
        return None
    percent = finite(meta.get("percent"))
    if percent is None:
        current, total = finite(meta.get("current")), finite(meta.get("total"))
        if current is None or total is None or total <= 0:
            return None
        percent = current / total * 100
    stage = meta.get("stage")
    stage = stage.replace("\x00", "")[:MAX_STAGE_CHARS] if isinstance(stage, str) else None
    return math.floor(min(100.0, max(0.0, percent))), stage


def log_text(
    message: str, level: str, secrets: Sequence[str] = (), redaction: Redaction = NO_KEYS
) -> str:
    """The stored text of a log line: secret values, ``key=value`` pairs under secret keys
    and URL credentials masked (before it is cut, so no secret is half kept), NUL
    removed, at most :data:`MAX_LOG_CHARS`; a level other than info leads it."""
    text = redaction.mask(message.replace("\x00", ""), secrets)
    if level != "info":
        text = f"{level}: {text}"
    if len(text) > MAX_LOG_CHARS:
        text = text[: MAX_LOG_CHARS - 1] + "…"
    return text


def dropped_line(limit: int) -> str:
    """The one line written when a job reaches its log limit."""
    return f"log limit reached ({limit} lines per job): further lines of this job are dropped"


@dataclass
class Coalescer:
    """Which progress values a run writes: the first at once, then at most one per
    ``interval_s``; a value the interval held back stays pending until it is due (or
    the body ends), replaced by any newer one. Pure: the caller passes the clock."""

    interval_s: float
    #: the value the row holds from this run (None: nothing written yet)
    written: Value | None = None
    #: the newest value not written yet
    pending: Value | None = None
    #: when the last write was sent (also a failed one: retried one interval later)
    sent_at: float | None = None
    #: the newest stage given (a value without a stage keeps it)
    stage: str | None = None

    def offer(self, value: Value, now: float) -> Value | None:
        """Take the body's newest ``value``; returns it if it must be written now."""
        percent, stage = value
        if stage is None:
            stage = self.stage
        self.stage = stage
        value = (percent, stage)
        if self.pending is None and value == self.written:
            return None
        self.pending = value
        return self.due(now)

    def due(self, now: float) -> Value | None:
        """The pending value, if one is pending and the interval since the last write
        has passed."""
        if self.pending is None:
            return None
        if self.sent_at is not None and now - self.sent_at < self.interval_s:
            return None
        return self.pending

    def next_due(self) -> float | None:
        """When the pending value will be due (None: nothing pending)."""
        if self.pending is None:
            return None
        return (self.sent_at or 0.0) + self.interval_s

    def sent(self, value: Value, now: float, written: bool) -> None:
        """A write of ``value`` was sent at ``now``; ``written``: the row took it."""
        self.sent_at = now
        if written:
            self.written = value
            if self.pending == value:
                self.pending = None
