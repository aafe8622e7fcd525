"""Public import path of the job values (``celery_tracked.jobs.NewRow``, as docs/usage.md
shows): their home is ``core/jobs.py``."""

from .core.jobs import Claim, EnqueueResult, Event, Job, JobEvent, JobStatus, NewRow, utcnow

__all__ = ["Claim", "EnqueueResult", "Event", "Job", "JobEvent", "JobStatus", "NewRow", "utcnow"]
