"""What is paused (``PauseStore``): one row of ``background_job_pauses`` per paused queue,
job type or everything (``paused_at`` on the database's clock), and the worker's hold of a
delivery a pause covers (``HOLD`` in ``transitions.py``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String, Text, bindparam, delete, insert, select

from ..core.circuits import held_by
from ..core.pauses import Pause
from . import transitions as moves
from .clock import db_time
from .engines import Applying
from .models import pauses
from .translate import DuplicateJob, reconnecting, translated

_SCOPE, _NAME = bindparam("scope", type_=String), bindparam("name", type_=String)
INSERT_PAUSE = insert(pauses).values(
    scope=_SCOPE,
    name=_NAME,
    paused_by=bindparam("paused_by", type_=String),
    reason=bindparam("reason", type_=Text),
    paused_at=db_time(),
)
DELETE_PAUSE = delete(pauses).where(pauses.c.scope == _SCOPE, pauses.c.name == _NAME)
SELECT_PAUSES = select(pauses).order_by(pauses.c.paused_at, pauses.c.scope, pauses.c.name)


class Pauses(Applying):
    """The pauses side of :class:`~celery_tracked.store.JobStore`."""

    def pause(self, scope: str, name: str, *, by: str | None, reason: str | None) -> bool:
        """Insert the pause; False when that scope and name were paused already."""
        params = {"scope": scope, "name": name, "paused_by": by, "reason": reason}
        try:
            with translated("pausing", inserting=True), self.engines.transaction() as conn:
                conn.execute(INSERT_PAUSE, params)
        except DuplicateJob:  # the primary key (scope, name): the first pause's row stays
            return False
        return True

    @reconnecting
    def resume(self, scope: str, name: str) -> bool:
        """Delete the pause; False when there was none."""
        with translated("resuming"), self.engines.transaction() as conn:
            return bool(conn.execute(DELETE_PAUSE, {"scope": scope, "name": name}).rowcount)

    @reconnecting
    def pauses(self) -> list[Pause]:
        """Every pause in force, oldest first."""
        with translated("reading the pauses"), self.engines.transaction() as conn:
            return [Pause.from_row(row) for row in conn.execute(SELECT_PAUSES).mappings()]

    @reconnecting
    def hold(
        self, job_id: str, revision: int, *, now: datetime, message: str, circuit: str = ""
    ) -> bool:
        """``HOLD``: the waiting row at ``revision`` held by a pause (module text); with
        ``circuit``, ``CIRCUIT_HOLD``: held by that open circuit (``circuits.py``)."""
        params = {"job_id": job_id, "at_revision": revision, "now": now, "message": message}
        if circuit:
            return (
                self.apply(moves.CIRCUIT_HOLD, {**params, "held_by": held_by(circuit)}) is not None
            )
        return self.apply(moves.HOLD, params) is not None
