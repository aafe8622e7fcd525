"""The action log (``ActionStore``, ``core/actions.py``): one row of
``background_job_actions`` per action done by hand, and an ``action`` event on each job it
changed, in one transaction; read newest first by the primary key (keyset on ``id``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, Integer, String, Text, bindparam, insert, literal, select

from ..core.actions import Action
from ..core.jobs import Event
from .clock import db_time
from .engines import Applying
from .models import actions, events, jobs
from .statements import JOB_ID, MESSAGE
from .translate import reconnecting, translated

INSERT_ACTION = insert(actions).values(
    actor=bindparam("actor", type_=String),
    role=bindparam("role", type_=String),
    action=bindparam("action", type_=String),
    target=bindparam("target", type_=String),
    changed=bindparam("changed", type_=Integer),
    refused=bindparam("refused", type_=Integer),
    detail=bindparam("detail", type_=Text),
    created_at=db_time(),
)
#: the ``action`` event on a job the action changed (nothing for a job gone meanwhile)
INSERT_ACTION_EVENT = insert(events).from_select(
    ["job_id", "event", "status", "attempt", "message", "created_at"],
    select(
        jobs.c.id,
        literal(Event.ACTION.value, String),
        jobs.c.status,
        jobs.c.attempts_made,
        MESSAGE,
        db_time(),
    ).where(jobs.c.id == JOB_ID),
)
#: ``before``: an id (the page's last), or above every id for the first page
SELECT_ACTIONS = (
    select(actions)
    .where(actions.c.id < bindparam("before", type_=BigInteger))
    .order_by(actions.c.id.desc())
    .limit(bindparam("limit", type_=Integer))
)
#: above every id: the first page's ``before``
_TOP = 2**62
_COLUMNS = ("actor", "role", "action", "target", "changed", "refused", "detail")


class Actions(Applying):
    """The action log's side of :class:`~celery_tracked.store.JobStore`."""

    def record_action(self, row: Mapping[str, Any], job_ids: Sequence[str]) -> int:
        """Insert the action and an ``action`` event on each job of ``job_ids`` (message
        ``row["message"]``), in one transaction; not re-sent on a dead connection."""
        params = {name: row[name] for name in _COLUMNS}
        notes = [{"job_id": job_id, "message": row["message"]} for job_id in job_ids]
        with translated("recording the action"), self.engines.transaction() as conn:
            key = conn.execute(INSERT_ACTION, params).inserted_primary_key
            if notes:
                conn.execute(INSERT_ACTION_EVENT, notes)
        return int(key[0]) if key else 0

    @reconnecting
    def actions(self, before: int | None, limit: int) -> list[Action]:
        """The actions newest first, those with an id below ``before`` only."""
        params = {"before": _TOP if before is None else before, "limit": limit}
        with translated("reading the action log"), self.engines.transaction() as conn:
            return [Action.from_row(r) for r in conn.execute(SELECT_ACTIONS, params).mappings()]
