"""A freed concurrency slot handed to the key's next due waiting job (``HandOffStore``).

``next_waiting``: the key's jobs that may take a freed slot, in the order they get it:
waiting (``pending``/``retrying``), due (``not_before`` passed on the database's clock: a
job is never handed a slot early), not past its deadline, its message out (a row held in
the database, by the scheduler or a pause, has none: ``published_at`` NULL), nobody's
(``UNLOCKED``: not held by a relay, nor already handed a slot), no pause covering it.
Oldest first; for a fair task (``fairness_key``) round-robin: the fairness keys after the
ended job's one first, in the keys' order, then the others (wrapping round), oldest first
within one key.

``hand_slot``: ``HAND_SLOT``, under the key's lock and only while the key has a free slot
(``KEY_FREE``, which counts a handed slot as held): fenced by the revision read, so two
jobs that end together never hand their slots to the same waiting job, and by ``DUE``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Select, String, case, or_, select

from ..core.jobs import Job, JobStatus
from ..core.limits import HANDOFF_S, SLOT_HANDED
from . import transitions as moves
from .engines import Applying
from .holds import UNPAUSED
from .models import jobs
from .statements import ALIVE, CONCURRENCY_KEY, DUE, JOB_ID, UNLOCKED, param
from .translate import reconnecting, translated

#: How many waiting jobs one hand-off reads (a concurrent hand-off may take the first).
CANDIDATES = 3
#: The ended job's fairness key: the next keys in order come first.
_AFTER = param("after_fairness_key", String, optional=True)


def _waiting(*order: Any) -> Select[Any]:
    return (
        select(jobs)
        .where(
            jobs.c.concurrency_key == CONCURRENCY_KEY,
            or_(
                jobs.c.status == JobStatus.PENDING.value,
                jobs.c.status == JobStatus.RETRYING.value,
            ),
            *DUE,
            *ALIVE,
            *UNLOCKED,
            jobs.c.published_at.is_not(None),
            jobs.c.id != JOB_ID,
            UNPAUSED,
        )
        .order_by(*order, jobs.c.created_at, jobs.c.id)
        .limit(CANDIDATES)
    )


#: First come, first served.
NEXT_WAITING = _waiting()
#: Round-robin by fairness key, from the one after the ended job's.
NEXT_WAITING_FAIR = _waiting(case((jobs.c.fairness_key > _AFTER, 0), else_=1), jobs.c.fairness_key)


class HandOff(Applying):
    """The hand-off side of :class:`~celery_tracked.store.JobStore`."""

    @reconnecting
    def next_waiting(
        self, key: str, after: str, *, fair: bool = False, fairness_key: str | None = None
    ) -> list[Job]:
        """The jobs of ``key`` that may take the slot ``after`` (an ended job) freed, in
        the order they get it (round-robin from ``fairness_key`` when ``fair``)."""
        params = {"limited_key": key, "job_id": after, "after_fairness_key": fairness_key}
        query = NEXT_WAITING_FAIR if fair else NEXT_WAITING
        with translated("reading the concurrency key"), self.engines.transaction() as conn:
            rows = conn.execute(query, params).mappings().all()
        return [Job.from_row(row) for row in rows]

    @reconnecting
    def hand_slot(self, job: Job, limit: int, *, now: datetime) -> Job | None:
        """Hand a free slot of ``job``'s concurrency key (``limit``) to the waiting ``job``
        as read: its new message revision, its slot held ``HANDOFF_S`` seconds. None when
        the key has no free slot or the job moved since it was read."""
        key = job.concurrency_key
        assert key is not None
        params: dict[str, Any] = {"job_id": job.id, "at_revision": job.revision, "now": now}
        params.update(limited_key=key, concurrency_limit=limit, lease_s=HANDOFF_S)
        params["message"] = f"a freed slot of concurrency key {key!r} handed to it"
        if self.apply(moves.HAND_SLOT, params, key=key) is None:
            return None
        return replace(job, revision=job.revision + 1, published_at=None, locked_by=SLOT_HANDED)
