"""What a page or its JSON shows of a job, an event, a queue: safe values only.

A job's view never holds its result, its sealed secrets or its raw payload: its arguments
are the stored (redacted) ones, redacted once more by the app's masking (a value under a
secret name is ``[redacted]``, credentials in a URL masked), and every text the job's run
wrote (error summary, stage, log lines) is masked again on the way out.
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

from ..core.jobs import Job, JobEvent
from ..core.redact import Redaction

#: A job's fields a page shows (never ``payload_json``, ``secrets_sealed``, ``result_json``).
FIELDS = (
    "id",
    "status",
    "queue_name",
    "job_type",
    "task_name",
    "celery_task_id",
    "attempts_made",
    "max_attempts",
    "priority",
    "idempotency_key",
    "correlation_id",
    "parent_job_id",
    "owner_id",
    "tenant",
    "concurrency_key",
    "fairness_key",
    "progress",
    "stage",
    "worker",
    "error_type",
    "error_message",
    "created_at",
    "started_at",
    "finished_at",
    "updated_at",
    "due_at",
    "deadline_at",
    "published_at",
    "cancel_requested_at",
    "retries_exhausted",
    "revision",
)
_TEXTS = ("stage", "error_message", "worker", "idempotency_key", "tenant", "fairness_key")


def when(value: datetime | None) -> str | None:
    """An ISO 8601 UTC time to the second (None stays None)."""
    return None if value is None else value.isoformat(timespec="seconds")


def job_view(job: Job, masking: Redaction) -> dict[str, Any]:
    """The shown fields of ``job`` (times ISO 8601, texts masked)."""
    out: dict[str, Any] = {}
    for name in FIELDS:
        value = getattr(job, name)
        if isinstance(value, datetime):
            value = when(value)
        elif name in _TEXTS and isinstance(value, str):
            value = masking.mask(value)
        elif name == "status":
            value = value.value
        out[name] = value
    out["duration_ms"] = job.duration_ms
    out["has_result"] = job.result_json is not None
    return out


def arguments(job: Job, masking: Redaction) -> str:
    """The job's stored arguments, redacted again, as indented JSON ("" if none)."""
    if job.payload_json is None:
        return ""
    try:
        shown = masking.redact(job.payload)
        text = json.dumps(shown, indent=2, sort_keys=True, default=str, ensure_ascii=False)
    except Exception:  # an undecodable payload is shown as nothing, never raw
        return "(arguments not readable)"
    return masking.mask(text)


def event_view(event: JobEvent, masking: Redaction) -> dict[str, Any]:
    return {
        "id": event.id,
        "event": event.event,
        "status": event.status.value,
        "attempt": event.attempt,
        "message": None if event.message is None else masking.mask(event.message),
        "duration_ms": event.duration_ms,
        "created_at": when(event.created_at),
    }


#: a bucket's count drawn as one of these, scaled to the queue's busiest bucket
BARS = "▁▂▃▄▅▆▇█"


def spark(counts: list[int]) -> str:
    """``counts`` as a line of bars (empty buckets as a space)."""
    top = max(counts, default=0)
    if top == 0:
        return ""
    return "".join(" " if n == 0 else BARS[min(7, n * 8 // (top + 1))] for n in counts)


def queue_rows(
    stats: dict[str, dict[str, Any]], throughput: dict[str, Any]
) -> list[dict[str, Any]]:
    """The overview's rows, one per queue, by name, each with its throughput (ended
    jobs per minute, per bucket as bars, run-time percentiles)."""
    rows = []
    ended = throughput.get("queues", {})
    for name in sorted(set(stats) | set(ended)):
        entry = stats.get(name, {})
        flow = ended.get(name, {})
        rows.append(
            {
                "queue": name,
                "counts": dict(entry.get("counts", {})),
                "total": entry.get("total", 0),
                "scheduled": entry.get("scheduled", 0),
                "oldest_pending_age_s": entry.get("oldest_pending_age_s"),
                "failed_last_hour": entry.get("failed_last_hour", 0),
                "expired_leases": entry.get("expired_leases", 0),
                "paused": entry.get("paused"),
                "per_minute": flow.get("per_minute", 0.0),
                "spark": spark(flow.get("buckets", [])),
                "run_ms": flow.get("run_ms", {}),
            }
        )
    return rows


def pause_view(pause: Any) -> dict[str, Any]:
    return {
        "scope": pause.scope,
        "name": pause.name,
        "paused_by": pause.paused_by,
        "paused_at": when(pause.paused_at),
        "reason": pause.reason,
    }


def circuit_view(circuit: Any) -> dict[str, Any]:
    """A circuit breaker's fields (``Tracker.circuits()``: issue 27), times ISO 8601."""
    if not is_dataclass(circuit):
        return {"name": str(circuit)}
    out = {}
    for f in fields(circuit):
        value = getattr(circuit, f.name)
        out[f.name] = when(value) if isinstance(value, datetime) else value
    return out
