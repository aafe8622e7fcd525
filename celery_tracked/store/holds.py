"""Rows held in the database on purpose, as the statements see them: a pause's hold and an
open circuit's (``locked_by``: ``'paused'``, ``'circuit:<name>'``; no message, no lease),
and the relay's fence of a waiting row that has no message (``UNPUBLISHED``), which such a
hold joins once no pause covers it and its circuit closed.
"""

from __future__ import annotations

from sqlalchemy import String, and_, exists, literal, or_

from ..core.circuits import CLOSED, HELD_BY_CIRCUIT
from ..core.pauses import ALL, HELD_BY_PAUSE, JOB_TYPE, QUEUE
from .clock import db_time
from .models import circuits, jobs, pauses
from .statements import CUTOFF, param

#: No pause covers the row's queue or job type (``background_job_pauses``).
UNPAUSED = ~exists().where(
    or_(
        and_(pauses.c.scope == QUEUE, pauses.c.name == jobs.c.queue_name),
        and_(pauses.c.scope == JOB_TYPE, pauses.c.name == jobs.c.job_type),
        pauses.c.scope == ALL,
    )
)
#: A waiting row a pause held in the database (``hold``): no message, no lease.
PAUSE_HELD = jobs.c.locked_by == HELD_BY_PAUSE
#: A waiting row an open circuit held in the database (``locked_by = 'circuit:<name>'``).
CIRCUIT_HELD = jobs.c.locked_by.like(HELD_BY_CIRCUIT + "%")
#: The circuit holding a row (``circuits.held_by``), and a held row no pass holds now.
HELD_BY = param("held_by", String)
UNSENT_HELD = (
    jobs.c.published_at.is_(None),
    or_(jobs.c.locked_until.is_(None), jobs.c.locked_until < db_time()),
)
#: Held on purpose, by a pause or a circuit: no message, no lease.
HELD_ON_PURPOSE = or_(PAUSE_HELD, CIRCUIT_HELD)
#: No circuit holding the row is open or half-open (``background_job_circuits``).
UNTRIPPED = ~exists().where(
    circuits.c.state != CLOSED,
    literal(HELD_BY_CIRCUIT, String) + circuits.c.name == jobs.c.locked_by,
)
#: A waiting row whose message was never handed to the broker, old enough to be relayed
#: (created, or its message last replaced, before the cutoff) or held by a pause now
#: lifted or a circuit now closed, not held by a relay now, and no pause covers it.
UNPUBLISHED = (
    jobs.c.published_at.is_(None),
    or_(jobs.c.updated_at < CUTOFF, HELD_ON_PURPOSE),
    or_(jobs.c.locked_until.is_(None), jobs.c.locked_until < db_time()),
    UNPAUSED,
    UNTRIPPED,
)
