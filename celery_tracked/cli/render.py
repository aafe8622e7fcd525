"""How the CLI shows things, pure: relative times, aligned tables, colour, and the stable
JSON form of a job and of an event (never its payload or result).

Colour only on a terminal, and never when ``NO_COLOR`` is set to anything
(https://no-color.org) or ``TERM=dumb``. Every cell's text is shown with its control
characters escaped (``core/printable.py``): job data never reaches a terminal raw.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from ..core.jobs import Job, JobEvent, JobStatus
from ..core.printable import duration as duration
from ..core.printable import visible

#: ANSI colour of each status (and of a few other words).
COLOURS: Mapping[str, str] = {
    JobStatus.PENDING.value: "36",  # cyan
    JobStatus.PROCESSING.value: "34",  # blue
    JobStatus.RETRYING.value: "33",  # yellow
    JobStatus.COMPLETED.value: "32",  # green
    JobStatus.FAILED.value: "31",  # red
    JobStatus.CANCELLED.value: "35",  # magenta
    "refused": "31",
    "dim": "2",
    "bold": "1",
}
#: A cell: its text, and the colour to paint it (a ``COLOURS`` key) or None.
Cell = str | tuple[str, str | None]


@dataclass(frozen=True)
class Style:
    """Whether to paint, decided once per output stream."""

    colour: bool = False

    @classmethod
    def for_stream(cls, stream: TextIO, environ: Mapping[str, str] | None = None) -> Style:
        env = os.environ if environ is None else environ
        tty = bool(getattr(stream, "isatty", lambda: False)())
        return cls(tty and not env.get("NO_COLOR") and env.get("TERM") != "dumb")

    def paint(self, text: str, colour: str | None) -> str:
        if not self.colour or colour is None or colour not in COLOURS:
            return text
        return f"\x1b[{COLOURS[colour]}m{text}\x1b[0m"


def relative(when: datetime | None, now: datetime) -> str:
    """``when`` seen from ``now``: "12s ago", "3m ago", "5h ago", "2d ago", "in 30s";
    older than 30 days: its date. "-" for None."""
    if when is None:
        return "-"
    seconds = (now - when).total_seconds()
    ahead = seconds < 0
    seconds = abs(seconds)
    if seconds >= 30 * 86400:
        return when.strftime("%Y-%m-%d")
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            amount = f"{int(seconds // size)}{unit}"
            break
    else:
        amount = f"{int(seconds)}s"
    return f"in {amount}" if ahead else f"{amount} ago"


def clip(text: str | None, width: int) -> str:
    """One line of at most ``width`` characters ("…" when cut); "" for None."""
    if not text:
        return ""
    line = visible(" ".join(text.split()))
    return line if len(line) <= width else line[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], style: Style) -> str:
    """Rows aligned under their headers, two spaces apart; the last column is not padded.
    Widths are measured on the text, colour is added after padding."""
    texts = [[visible(c if isinstance(c, str) else c[0]) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in texts:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    last = len(headers) - 1
    header = [h.ljust(widths[i]) if i < last else h for i, h in enumerate(headers)]
    lines = ["  ".join(style.paint(h, "bold") for h in header).rstrip()]
    for row, cells in zip(texts, rows, strict=True):
        parts = []
        for i, (text, cell) in enumerate(zip(row, cells, strict=True)):
            padded = text.ljust(widths[i]) if i < last else text
            parts.append(style.paint(padded, None if isinstance(cell, str) else cell[1]))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, Cell]], style: Style) -> str:
    """``name  value`` lines, the values aligned."""
    width = max((len(name) for name, _ in pairs), default=0)
    out = []
    for name, cell in pairs:
        text, colour = (cell, None) if isinstance(cell, str) else cell
        text = visible(text)
        out.append(f"{style.paint(name.ljust(width), 'bold')}  {style.paint(text, colour)}")
    return "\n".join(out)


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def job_dict(job: Job) -> dict[str, Any]:
    """A job's stable JSON form: never its payload, never its result."""
    return {
        "id": job.id,
        "status": job.status.value,
        "queue": job.queue_name,
        "job_type": job.job_type,
        "task_name": job.task_name,
        "attempts": f"{job.attempts_made}/{job.max_attempts}",
        "attempts_made": job.attempts_made,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "progress": job.progress,
        "stage": job.stage,
        "error": f"{job.error_type}: {job.error_message}" if job.error_type else None,
        "error_type": job.error_type,
        "error_message": job.error_message,
        "correlation_id": job.correlation_id,
        "parent_job_id": job.parent_job_id,
        "owner_id": job.owner_id,
        "tenant": job.tenant,
        "idempotency_key": job.idempotency_key,
        "worker": job.worker,
        "created_at": _iso(job.created_at),
        "due_at": _iso(job.due_at),
        "deadline_at": _iso(job.deadline_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "updated_at": _iso(job.updated_at),
        "cancel_requested_at": _iso(job.cancel_requested_at),
        "duration_ms": job.duration_ms,
    }


def event_dict(event: JobEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "event": event.event,
        "status": event.status.value,
        "attempt": event.attempt,
        "message": event.message,
        "duration_ms": event.duration_ms,
        "created_at": event.created_at.isoformat(),
    }


def job_rows(jobs: Sequence[Job], now: datetime) -> list[list[Cell]]:
    """The ``jobs`` listing's rows (``JOB_HEADERS``)."""
    rows: list[list[Cell]] = []
    for job in jobs:
        error = f"{job.error_type}: {job.error_message}" if job.error_type else ""
        rows.append(
            [
                job.id,
                (job.status.value, job.status.value),
                job.queue_name,
                job.job_type,
                "-" if job.priority is None else str(job.priority),
                f"{job.attempts_made}/{job.max_attempts}",
                relative(job.created_at, now),
                relative(job.due_at, now),
                relative(job.finished_at, now),
                clip(error, 60),
            ]
        )
    return rows


JOB_HEADERS = (
    "ID",
    "STATUS",
    "QUEUE",
    "JOB TYPE",
    "PRIORITY",
    "ATTEMPTS",
    "CREATED",
    "DUE",
    "ENDED",
    "ERROR",
)
