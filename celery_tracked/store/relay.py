"""The relay's side of the store (``RelayStore``): the pending rows whose message was never
handed to the broker, the relay's claim of one and its mark once published.
"""

from __future__ import annotations

from datetime import datetime

from . import selects
from . import transitions as moves
from .engines import Applying
from .translate import reconnecting, translated


class Relay(Applying):
    """The relay's side of :class:`~celery_tracked.store.JobStore` (``Apply.apply``)."""

    @reconnecting
    def unpublished(self, *, cutoff: datetime, now: datetime) -> list[str]:
        """Ids of waiting jobs whose message was never handed to the broker, no relay
        holds and no pause covers: pending ones due at ``now`` created before ``cutoff``
        or held by a pause (``hold``), and retrying ones a pause held (oldest first, at
        most 100)."""
        params = {"cutoff": cutoff, "now": now}
        with translated("reading unpublished jobs"), self.engines.transaction() as conn:
            rows = [
                *conn.execute(selects.SELECT_UNPUBLISHED, params).all(),
                *conn.execute(selects.SELECT_HELD_RETRYING, params).all(),
            ]
        rows.sort(key=lambda row: row[1])
        return [str(row[0]) for row in rows[:100]]

    @reconnecting
    def relay_claim(
        self,
        job_id: str,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        cutoff: datetime,
        moved_due: datetime | None = None,
    ) -> bool:
        """Take an unpublished pending row (created or replaced before ``cutoff``) for the relay
        ``owner``, for ``lease_s`` seconds of the database's clock (its due time moved to
        ``moved_due`` when given: a fast-forwarded scheduler pass); False if it was
        published, taken or moved meanwhile."""
        params = {"job_id": job_id, "owner": owner, "now": now, "lease_s": lease_s}
        params.update(cutoff=cutoff, moved_due=moved_due)
        return self.apply(moves.RELAY_CLAIM, params) is not None

    @reconnecting
    def relayed(
        self, job_id: str, *, owner: str, now: datetime, message: str, revision: int = 0
    ) -> bool:
        """The relay ``owner`` published the row it claimed (at ``revision``): mark it
        handed over."""
        params = {"job_id": job_id, "owner": owner, "now": now, "message": message}
        params["at_revision"] = revision
        return self.apply(moves.RELAYED, params) is not None
