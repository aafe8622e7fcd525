"""When a row looks stalled to the reaper (``reaper.py``), pure: its thresholds, from the
settings; how long after a pass that found a job's message nowhere another may confirm it;
why a row looks stalled (:func:`stalled_why`), which messages are presumed lost
(:func:`presumed_lost`) and what becomes of a stalled job (:func:`decide`)."""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..core.jobs import Job, JobStatus
from ..core.settings import Settings
from .lease import GRACE_SHARE, diagnose
from .sealing import unsendable

__all__ = [
    "CONFIRM_S",
    "MIN_CONFIRM_S",
    "Action",
    "Decision",
    "Thresholds",
    "asks_broker",
    "confirm_seconds",
    "decide",
    "message_id",
    "presumed_lost",
    "stalled_why",
]

_WAITING = (JobStatus.PENDING, JobStatus.RETRYING)


@dataclass(frozen=True)
class Thresholds:
    """When a row looks stalled, from the settings (seconds)."""

    #: a lapsed lease may be taken over this long after its expiry (¼ lease)
    lease_grace_s: float
    #: then the reaper waits this long more (``reaper_processing_seconds``)
    processing_s: float
    pending_s: float
    retrying_s: float
    max_rescues: int
    #: a message found nowhere is taken as lost only if a pass at least this long before
    #: found it nowhere too (and nothing happened to the job since): a holder that missed
    #: one pass's question (paused, busy) is not robbed of its job
    confirm_s: float = 0.0

    def cutoff(self, status: JobStatus, now: datetime) -> datetime:
        """A job of ``status`` is stalled once its last sign of life is older than this."""
        seconds = {
            JobStatus.PROCESSING: self.lease_grace_s + self.processing_s,
            JobStatus.PENDING: self.pending_s,
            JobStatus.RETRYING: self.retrying_s,
        }[status]
        return now - timedelta(seconds=seconds)

    @classmethod
    def of(cls, settings: Settings) -> Thresholds:
        return cls(
            lease_grace_s=settings.lease_seconds * GRACE_SHARE,
            processing_s=settings.reaper_processing_seconds,
            pending_s=settings.reaper_pending_seconds,
            retrying_s=settings.reaper_retrying_seconds,
            max_rescues=settings.reaper_max_rescues,
            confirm_s=confirm_seconds(settings.reaper_interval_seconds),
        )


#: The confirming pass comes at least this long after the first (seconds), however often
#: the reaper runs; with no Beat entry (interval 0), ``CONFIRM_S``.
MIN_CONFIRM_S = 1.0
CONFIRM_S = 30.0


def confirm_seconds(interval_s: float) -> float:
    """How long after a pass that found a message nowhere another may confirm it: half the
    reaper's interval (so the next pass of its Beat entry does), at least
    :data:`MIN_CONFIRM_S`."""
    if interval_s <= 0:
        return CONFIRM_S
    return max(MIN_CONFIRM_S, interval_s / 2)


class Action(str, enum.Enum):
    RESCUE = "rescue"
    ABANDON = "abandon"


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str


def message_id(job: Job) -> str:
    """The task id of the job's messages (the job id, but for a ``self.replace``
    replacement's)."""
    return job.celery_task_id or job.id


def _ago(now: datetime, then: datetime) -> str:
    return f"{max(0.0, (now - then).total_seconds()):.0f} s ago"


def stalled_why(job: Job, *, db_now: datetime, now: datetime, limits: Thresholds) -> str | None:
    """Why ``job``'s row alone says nothing will move it any more; None if it does not.

    ``db_now`` is the database's clock: a lease is lapsed (no live holder) only on it.
    ``now`` (default: the same) judges how long ago the last sign of life was.
    """
    if job.status is JobStatus.PROCESSING:
        lease = diagnose(job, db_now, None, limits.lease_grace_s)
        last = job.locked_until or job.updated_at  # expired, or released
        if not lease.lapsed or last >= limits.cutoff(job.status, now):
            return None
        return f"attempt {job.attempts_made} was lost ({lease.why} {_ago(now, last)})"
    if job.status is JobStatus.PENDING:
        sent, due = job.published_at, job.not_before
        if sent is None or sent >= limits.cutoff(job.status, now):
            return None  # never handed over: the relay's
        if due is not None and (due > db_now or due >= limits.cutoff(job.status, now)):
            return None  # not due yet (its countdown/eta), or only lately
        if due is not None and due > sent:
            return f"it was due {_ago(now, due)} (its countdown/eta) and never started"
        return f"its message was handed to the broker {_ago(now, sent)} and never started"
    if job.status is JobStatus.RETRYING:
        due, cutoff = job.not_before, limits.cutoff(job.status, now)
        if due is None or due >= cutoff:
            return None
        if job.published_at is not None and job.published_at >= cutoff:
            return None  # a postponed delivery handed its message over again since
        return f"its retry was due {_ago(now, due)} and never started"
    return None


def asks_broker(job: Job) -> bool:
    """Whether the broker is asked before ``job`` is settled: a waiting job (its message may
    be queued, or held by a live worker), and a run with attempts left whose arguments were
    stored redacted. Such a run cannot be re-sent from its row, only abandoned, while its
    original message, the one that carries the arguments, may be back in its queue
    (RabbitMQ gives a dead consumer's messages back at once; Redis after
    ``visibility_timeout``) or held by a live worker, whose delivery then takes it over."""
    if job.status in _WAITING:
        return True
    return (
        job.status is JobStatus.PROCESSING
        and job.attempts_made < job.max_attempts
        and unsendable(job)
    )


def _waiting_since(job: Job) -> datetime:
    when = job.published_at if job.status is JobStatus.PENDING else job.not_before
    if job.status is JobStatus.PENDING and job.not_before is not None and when is not None:
        when = max(when, job.not_before)  # due after its countdown/eta
    return when or job.updated_at


def presumed_lost(
    waiting: Sequence[Job], held: Collection[str] | None, ready: int | None
) -> list[Job]:
    """Of one queue's stalled-looking waiting jobs, those whose message is presumed lost.

    Not lost: one a live worker holds (``held``), and as many of the rest as the queue has
    ready messages (``ready``: they may be those; the newest are taken to be, as a FIFO
    queue keeps its newest longest). Nothing is presumed lost when either is unknown.
    """
    if held is None or ready is None:
        return []
    unheld = sorted((j for j in waiting if message_id(j) not in held), key=_waiting_since)
    return unheld[: max(0, len(unheld) - ready)]


def decide(job: Job, rescues: int, limits: Thresholds, broken: str | None = None) -> Decision:
    """Rescue a stalled job, or abandon it: a lost last attempt, too many rescues, or
    arguments stored redacted and not sealed (a message rebuilt from the row would carry
    the marker), or sealed where no key here opens them (``broken``: why)."""
    if job.status is JobStatus.PROCESSING and job.attempts_made >= job.max_attempts:
        return Decision(Action.ABANDON, f"no attempts remain ({job.max_attempts} made)")
    if rescues >= limits.max_rescues:
        return Decision(
            Action.ABANDON,
            f"rescued {rescues} time(s) already (tracked_reaper_max_rescues={limits.max_rescues})",
        )
    if broken is not None:
        return Decision(Action.ABANDON, broken)
    if unsendable(job):
        return Decision(
            Action.ABANDON,
            "its arguments were stored redacted, so it cannot be re-sent as called: run it "
            "again with tracker.retry(job_id, arguments={...the redacted ones...}) (set "
            "tracked_secret_key so that such jobs are re-sent)",
        )
    return Decision(Action.RESCUE, f"rescue {rescues + 1}: sent again")
