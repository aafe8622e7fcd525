"""background_jobs.not_before: when a ``retrying`` job's next attempt is due

One meaning per column. Until now ``locked_until`` held three: a run's lease
(``processing``), the time a ``retrying`` job's next attempt is due, and the relay's claim
on a ``pending`` row. From this revision ``locked_by``/``locked_until`` only say who holds
the row and until when (a run's lease, or the relay's claim), and ``not_before`` holds the
due time of a ``retrying`` row (NULL on every other row: due at once).

Existing ``retrying`` rows move their due time from ``locked_until`` to ``not_before``, their
``locked_by``/``locked_until`` cleared; the downgrade moves it back. No index: the readers
of ``not_before`` (the claim, by id; the reaper's "retrying long past due", a handful of
rows) are served by the primary key and the ``(status, created_at)`` index
(``EXPLAIN`` in docs/operations.md).

Revision ID: 0008_not_before
Revises: 0007_finding_jobs
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0008_not_before"
down_revision = "0007_finding_jobs"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("not_before", UTC, nullable=True))
    op.execute(
        "UPDATE background_jobs SET not_before = locked_until, locked_by = NULL, "
        "locked_until = NULL WHERE status = 'retrying'"
    )


def downgrade() -> None:
    op.execute(
        "UPDATE background_jobs SET locked_until = not_before, locked_by = NULL "
        "WHERE status = 'retrying'"
    )
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_column("not_before")
