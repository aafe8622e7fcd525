"""Circuit breakers (``CircuitStore``): one row of ``background_job_circuits`` per circuit,
each change of it one conditional ``UPDATE`` judged on the database's clock, and the moves
of the jobs an open circuit holds (``CIRCUIT_HOLD``, ``PROBE_CLAIM``, ``PROBE_SENT`` in
``transitions.py``).

MySQL and MariaDB assign ``SET`` clauses left to right, each reading the columns already
assigned; SQLAlchemy renders them in the table's column order, and ``models.circuits``
puts the columns a counted failure reads (``failures``, ``window_started_at``) last, so
every expression below reads the row as it was, as on PostgreSQL and SQLite.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Float, Integer, String, Text, and_, case, insert, or_, select
from sqlalchemy import update as sql_update

from ..core.circuits import CLOSED, HALF_OPEN, OPEN, Circuit, CircuitRule, held_by
from ..core.jobs import utcnow
from . import transitions as moves
from .clock import db_time
from .engines import Applying
from .models import circuits, jobs
from .statements import param
from .translate import DuplicateJob, reconnecting, translated

c = circuits.c
_NAME = param("circuit_name", String)
_JOB = param("probe_job", String)
_REASON = param("why", Text, optional=True)
_COOLDOWN_S = param("cooldown_s", Float)
_WINDOW_S = param("window_s", Float)

SELECT_CIRCUIT = select(circuits).where(c.name == _NAME)
SELECT_CIRCUITS = select(circuits).order_by(c.name)
INSERT_CIRCUIT = insert(circuits).values(
    name=_NAME,
    state=CLOSED,
    opened_count=0,
    probes=0,
    failures=0,
    updated_at=db_time(),
)
#: The rows a circuit holds, longest held first.
SELECT_HELD = (
    select(jobs.c.id)
    .where(jobs.c.locked_by == param("held_by", String), jobs.c.published_at.is_(None))
    .order_by(jobs.c.updated_at, jobs.c.created_at)
    .limit(param("limit", Integer))
)


def _update(*where: ColumnElement[bool], **values: Any) -> Any:
    return (
        sql_update(circuits).where(c.name == _NAME, *where).values(updated_at=db_time(), **values)
    )


def _opened(reason: Any, cooldown: Any) -> dict[str, Any]:
    """The values of an automatic open: now, cooling down ``cooldown`` seconds."""
    return {
        "state": OPEN,
        "opened_at": db_time(),
        "reopen_at": db_time(cooldown),
        "opened_by": None,
        "reason": reason,
        "opened_count": c.opened_count + 1,
        "probe_job_id": None,
        "probe_until": None,
    }


_CLOSED = {
    "state": CLOSED,
    "opened_by": None,
    "reason": None,
    "reopen_at": None,
    "probe_job_id": None,
    "probe_until": None,
    "closed_at": db_time(),
    "failures": 0,
    "window_started_at": None,
}

#: The current window: started less than ``window_s`` ago.
_IN_WINDOW = and_(c.window_started_at.is_not(None), c.window_started_at > db_time(-_WINDOW_S))
_FAILURES = case((_IN_WINDOW, c.failures + 1), else_=1)
_OPENS = param("threshold", Integer) <= _FAILURES
#: A counted failure while closed: one more in the window (a new window if it ended), and
#: the ``threshold``-th opens the circuit for ``cooldown_s``.
FAIL = _update(
    c.state == CLOSED,
    **{
        name: case((_OPENS, value), else_=getattr(c, name))
        for name, value in _opened(_REASON, _COOLDOWN_S).items()
    },
    failures=_FAILURES,
    window_started_at=case((_IN_WINDOW, c.window_started_at), else_=db_time()),
)
#: The cool-down of an automatic open ended: half-open, no probe yet.
HALF_OPEN_AFTER_COOLDOWN = _update(
    c.state == OPEN,
    c.opened_by.is_(None),
    c.reopen_at <= db_time(),
    state=HALF_OPEN,
    probe_job_id=None,
    probe_until=None,
)
#: A half-open circuit's probe taken by ``probe_job`` for ``lease_s``: none taken, or the
#: last one's time ran out (a probe taken again by its own job is not counted twice).
TAKE_PROBE = _update(
    c.state == HALF_OPEN,
    or_(c.probe_job_id.is_(None), c.probe_until < db_time(), c.probe_job_id == _JOB),
    probes=case((c.probe_job_id == _JOB, c.probes), else_=c.probes + 1),
    probe_job_id=_JOB,
    probe_until=db_time(param("lease_s", Float)),
)
_PROBING = (c.state == HALF_OPEN, c.probe_job_id == _JOB)
PROBE_PASSED = _update(*_PROBING, **_CLOSED)
PROBE_FAILED = _update(*_PROBING, **_opened(_REASON, _COOLDOWN_S))
#: Opened by hand (an automatic open becomes a manual one): held until closed by hand.
OPEN_BY_HAND = _update(
    or_(c.state != OPEN, c.opened_by.is_(None)),
    **{**_opened(_REASON, None), "reopen_at": None, "opened_by": param("by", String)},
)
CLOSE_BY_HAND = _update(c.state != CLOSED, **_CLOSED)


class Circuits(Applying):
    """The circuits side of :class:`~celery_tracked.store.JobStore` (module text)."""

    @reconnecting
    def circuit(self, name: str) -> Circuit | None:
        """The circuit's row, None if it never failed nor was opened."""
        with translated("reading a circuit"), self.engines.transaction() as conn:
            row = conn.execute(SELECT_CIRCUIT, {"circuit_name": name}).mappings().first()
        return None if row is None else Circuit.from_row(row)

    @reconnecting
    def circuits(self) -> list[Circuit]:
        """Every circuit's row, by name."""
        with translated("reading the circuits"), self.engines.transaction() as conn:
            return [Circuit.from_row(r) for r in conn.execute(SELECT_CIRCUITS).mappings()]

    def _change(self, statement: Any, params: dict[str, Any], create: bool = False) -> bool:
        """Run one conditional ``UPDATE``; ``create``: insert the closed row first if none."""
        with translated("changing a circuit"), self.engines.transaction() as conn:
            if conn.execute(statement, params).rowcount:
                return True
        if not create:
            return False
        try:
            with translated("adding a circuit", inserting=True), self.engines.transaction() as conn:
                conn.execute(INSERT_CIRCUIT, {"circuit_name": params["circuit_name"]})
        except DuplicateJob:  # another worker added it first
            pass
        with translated("changing a circuit"), self.engines.transaction() as conn:
            return bool(conn.execute(statement, params).rowcount)

    @reconnecting
    def circuit_failed(self, rule: CircuitRule, reason: str) -> Circuit | None:
        """``FAIL``: a counted failure while closed; the circuit as it is now."""
        params = {"circuit_name": rule.name, "threshold": rule.threshold, "window_s": rule.window_s}
        self._change(FAIL, {**params, "cooldown_s": rule.cooldown_s, "why": reason}, True)
        return self.circuit(rule.name)

    @reconnecting
    def half_open(self, name: str) -> bool:
        """``HALF_OPEN_AFTER_COOLDOWN``: False while it cools down, or not open by itself."""
        return self._change(HALF_OPEN_AFTER_COOLDOWN, {"circuit_name": name})

    @reconnecting
    def take_probe(self, name: str, job_id: str, *, lease_s: float) -> bool:
        """``TAKE_PROBE``: ``job_id`` is the half-open circuit's probe for ``lease_s``."""
        return self._change(
            TAKE_PROBE, {"circuit_name": name, "probe_job": job_id, "lease_s": lease_s}
        )

    @reconnecting
    def probe_ended(self, rule: CircuitRule, job_id: str, failed: str | None) -> bool:
        """The probe ``job_id`` of the half-open circuit passed (``PROBE_PASSED``: closed) or
        ``failed`` (``PROBE_FAILED``: open again for the rule's cool-down)."""
        params = {"circuit_name": rule.name, "probe_job": job_id}
        if failed is None:
            return self._change(PROBE_PASSED, params)
        return self._change(PROBE_FAILED, {**params, "cooldown_s": rule.cooldown_s, "why": failed})

    @reconnecting
    def by_hand(self, name: str, opened_by: str | None, reason: str | None) -> bool:
        """``OPEN_BY_HAND`` by ``opened_by`` (False: open by hand already), or, None,
        ``CLOSE_BY_HAND`` (False: closed already, or never opened)."""
        if opened_by is None:
            return self._change(CLOSE_BY_HAND, {"circuit_name": name})
        params = {"circuit_name": name, "by": opened_by, "why": reason}
        return self._change(OPEN_BY_HAND, params, create=True)

    @reconnecting
    def circuit_held(self, name: str, limit: int = 100) -> list[str]:
        """Ids of the waiting rows the circuit holds, longest held first."""
        params = {"held_by": held_by(name), "limit": limit}
        with translated("reading held jobs"), self.engines.transaction() as conn:
            return [str(row[0]) for row in conn.execute(SELECT_HELD, params)]

    @reconnecting
    def probe_claim(self, job_id: str, circuit: str, owner: str, lease_s: float) -> bool:
        """``PROBE_CLAIM``: the pass ``owner`` takes a row ``circuit`` holds, to send it."""
        params = {"job_id": job_id, "owner": owner, "now": utcnow(), "lease_s": lease_s}
        return self.apply(moves.PROBE_CLAIM, {**params, "held_by": held_by(circuit)}) is not None

    @reconnecting
    def probe_sent(self, job_id: str, owner: str, revision: int, message: str) -> bool:
        """``PROBE_SENT``: the pass ``owner`` published the probe it claimed (at ``revision``)."""
        params = {"job_id": job_id, "owner": owner, "now": utcnow(), "message": message}
        return self.apply(moves.PROBE_SENT, {**params, "at_revision": revision}) is not None
