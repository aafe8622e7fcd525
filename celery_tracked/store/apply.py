"""The one runner of a status move (:meth:`Apply.apply`): a
:class:`~celery_tracked.store.statements.Move` of ``transitions.py`` and its history row,
atomically, plus the rows that go with it.

A move returns the moved row's ``(attempts_made, max_attempts)``, or ``None`` when the row
was not in a state the move allows (another run holds it, it ended, it is gone): the
caller decides what that means. Nothing here reads a row to decide a write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, insert

from ..core.jobs import JobStatus, NewRow
from . import inserts, selects
from . import statements as sql
from .engines import Engines
from .locks import key_locked
from .models import jobs, metadata
from .translate import translated

Moved = tuple[int, int]


class Apply:
    """The runner of :class:`~celery_tracked.store.JobStore`'s moves."""

    engines: Engines

    def apply(
        self,
        move: sql.Move,
        params: Mapping[str, Any],
        rows: Sequence[NewRow] = (),
        key: str | None = None,
    ) -> Moved | None:
        """Run ``move`` and its history row atomically, plus ``rows`` if it applied;
        under the lock of concurrency key ``key`` when given (``locks.py``).

        One statement on PostgreSQL (a CTE; through the fast path when no rows are joined
        and no key is locked), a short transaction elsewhere.
        """
        engines = self.engines.get()
        with translated(f"{move.name.replace('_', ' ')} of the job"):
            fastpath = None if rows or key is not None else engines.fastpath
            if engines.is_postgres and fastpath is not None:
                found = fastpath.execute(move.name, lambda: sql.move_cte(move), params)
                return None if found is None else (int(found[0]), int(found[1]))
            locked = key_locked(engines, key) if key is not None else engines.transaction()
            with locked as conn:
                found = self.apply_in(conn, move, params, engines.is_postgres)
                if found is not None:
                    insert_rows(conn, rows)
                return found

    @staticmethod
    def apply_in(
        conn: Connection, move: sql.Move, params: Mapping[str, Any], postgres: bool
    ) -> Moved | None:
        values = dict(params)
        if postgres:
            row = conn.execute(sql.move_cte(move), values).first()
        else:
            if conn.execute(sql.move_update(move), values).rowcount != 1:
                return None
            row = conn.execute(selects.SELECT_ATTEMPTS, values).first()
            if move.event is not None:
                conn.execute(sql.event_insert(jobs, move.event, move.target), values)
        return None if row is None else (int(row[0]), int(row[1]))


def insert_rows(conn: Connection, rows: Sequence[NewRow]) -> None:
    for row in rows:
        if not row.new_job:
            conn.execute(insert(metadata.tables[row.table]).values(dict(row.values)))
            continue
        params = {**inserts.NEW_JOB_DEFAULTS, **row.values}
        conn.execute(inserts.job_insert_if_absent(conn.dialect.name), params)
        # copied from the row: none when the insert was skipped (a new job's id is fresh)
        event = sql.event_insert(jobs, "enqueued", JobStatus.PENDING)
        values = {"job_id": params["id"], "now": params["created_at"], "message": row.message}
        conn.execute(event, values)
