"""The maintenance plugins' activity (issue 28): ``background_job_maintenance``

One row per maintenance plugin (``relay``, ``schedule``, ``reap``, ``cleanup``,
``probe``): its last pass (when it started and ended, on the database's clock; its
report's counts as JSON, numbers only; the masked error summary of a pass that failed,
else NULL) and its running totals since its first recorded pass (``since``): passes,
failed passes, jobs moved. Each pass writes its row with one upsert; the dashboard's
overview and ``celery tracked maintenance`` read the few rows whole: no index beyond the
primary key.

Revision ID: 0016_maintenance
Revises: 0015_actions
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0016_maintenance"
down_revision = "0015_actions"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "background_job_maintenance",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("started_at", UTC, nullable=False),
        sa.Column("ended_at", UTC, nullable=False),
        sa.Column("counts", sa.Text(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("passes", sa.BigInteger(), nullable=False),
        sa.Column("failures", sa.BigInteger(), nullable=False),
        sa.Column("jobs_total", sa.BigInteger(), nullable=False),
        sa.Column("since", UTC, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_background_job_maintenance"),
    )


def downgrade() -> None:
    op.drop_table("background_job_maintenance")
