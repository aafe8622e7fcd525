"""The maintenance plugins' activity (``MaintenanceStore``, ``core/maintenance.py``): one
row of ``background_job_maintenance`` per plugin, written by one upsert per pass.

The upsert is one statement per dialect family, its values written once
(:func:`upsert`): ``INSERT ... ON CONFLICT (name) DO UPDATE`` on PostgreSQL and SQLite,
``INSERT ... ON DUPLICATE KEY UPDATE`` on MySQL and MariaDB. Both times are the
database's clock: ``ended_at`` now, ``started_at`` the pass's duration (measured on this
host's monotonic clock) before it. The update's ``SET`` reads no column it assigns
before (MySQL and MariaDB assign left to right): the totals add to themselves only.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from sqlalchemy import BigInteger, Float, Integer, String, Text, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from ..core.maintenance import MaintenanceRun, Pass
from .clock import db_time
from .engines import Applying
from .models import maintenance
from .statements import param
from .translate import reconnecting, translated

m = maintenance.c
#: the first pass of a plugin: its row, its totals those of this pass
_VALUES: dict[str, Any] = {
    "name": param("name", String),
    "started_at": db_time(-param("elapsed_s", Float)),
    "ended_at": db_time(),
    "counts": param("counts", Text),
    "jobs": param("jobs", Integer),
    "error": param("error", Text),
    "passes": 1,
    "failures": param("failed", BigInteger),
    "jobs_total": param("jobs", BigInteger),
    "since": db_time(),
}
#: the columns the last pass replaces (the totals add to themselves instead)
_LAST = ("started_at", "ended_at", "counts", "jobs", "error")
SELECT_MAINTENANCE = select(maintenance).order_by(m.name)


@functools.cache
def upsert(dialect: str) -> Insert:
    """The one statement of a pass, for ``dialect``'s upsert syntax."""
    if dialect in ("postgresql", "sqlite"):
        family = postgresql if dialect == "postgresql" else sqlite
        pg_insert = family.insert(maintenance).values(_VALUES)
        new = pg_insert.excluded
        done: Insert = pg_insert.on_conflict_do_update(index_elements=[m.name], set_=_set(new))
        return done
    my_insert = mysql.insert(maintenance).values(_VALUES)  # MySQL, MariaDB
    return my_insert.on_duplicate_key_update(_set(my_insert.inserted))


def _set(new: Any) -> dict[str, Any]:
    """The update of an existing row; ``new``: the values the insert would have written."""
    return {
        **{name: new[name] for name in _LAST},
        "passes": m.passes + 1,
        "failures": m.failures + new.failures,
        "jobs_total": m.jobs_total + new.jobs_total,
    }


class Maintenance(Applying):
    """The maintenance activity's side of :class:`~celery_tracked.store.JobStore`."""

    def record_maintenance(self, done: Pass) -> None:
        """Upsert ``done``'s plugin row (not re-sent on a dead connection: a pass counted
        twice is worse than a pass not recorded)."""
        params = {
            "name": done.name,
            "elapsed_s": max(0.0, done.elapsed_s),
            "counts": json.dumps(dict(done.counts), sort_keys=True),
            "jobs": done.jobs,
            "error": done.error,
            "failed": int(done.error is not None),
        }
        with translated("recording a maintenance pass"), self.engines.transaction() as conn:
            conn.execute(upsert(conn.dialect.name), params)

    @reconnecting
    def maintenance(self) -> list[MaintenanceRun]:
        """Every plugin's row, by name."""
        with translated("reading the maintenance activity"), self.engines.transaction() as conn:
            return [MaintenanceRun.from_row(r) for r in conn.execute(SELECT_MAINTENANCE).mappings()]
