"""When a row looks stalled to the reaper (``reaper.py``): its thresholds, from the
settings, and how long after a pass that found a job's message nowhere another may confirm
it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..core.jobs import JobStatus
from ..core.settings import Settings
from .lease import GRACE_SHARE

__all__ = ["CONFIRM_S", "MIN_CONFIRM_S", "Thresholds", "confirm_seconds"]


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
