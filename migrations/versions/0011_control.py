"""Control over when jobs run (issue 26): priority, deadline, held jobs, pauses

- ``background_jobs.priority``: the job's message priority (Celery's ``priority=``, the
  task's ``priority``), kept by every re-publish (retry, relay, reaper, successors,
  ``Tracker.retry``); NULL: the broker's default.
- ``background_jobs.deadline_at``: the job must start by then (the database's clock), or it
  ends ``cancelled`` with the deadline's reason; NULL: no deadline.
- ``ix_background_jobs_held_due`` on ``not_before``: the rows with a due time (countdown,
  eta, backoff), for the pass that publishes the jobs held in the database as they come
  due. Partial on PostgreSQL and SQLite (a job without a due time never enters it);
  MariaDB has no partial indexes and indexes every row. Its condition names
  ``not_before`` only: an index whose condition named ``published_at`` would make the
  enqueue's hand-over mark (an ``UPDATE`` of ``published_at``) a non-HOT update on
  PostgreSQL, writing every index again (measured: 15.3 → 23.7 WAL records per enqueue).
- ``background_job_pauses``: one row per paused queue, job type, or everything
  (``scope`` ``queue``/``job_type``/``all``, ``name``; ``*`` for ``all``): who paused it,
  when (the database's clock) and why. Resuming deletes the row.

Revision ID: 0011_control
Revises: 0010_secrets_sealed
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0011_control"
down_revision = "0010_secrets_sealed"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
HELD = "not_before IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("priority", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("deadline_at", UTC, nullable=True))
        batch.create_index(
            "ix_background_jobs_held_due",
            ["not_before"],
            postgresql_where=sa.text(HELD),
            sqlite_where=sa.text(HELD),
        )
    op.create_table(
        "background_job_pauses",
        sa.Column("scope", sa.String(16), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("paused_at", UTC, nullable=False),
        sa.Column("paused_by", sa.String(255), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("background_job_pauses")
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_index("ix_background_jobs_held_due")
        batch.drop_column("deadline_at")
        batch.drop_column("priority")
