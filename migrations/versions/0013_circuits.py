"""Circuit breakers (issue 27): ``background_job_circuits``

One row per circuit (``@tracked_task(circuit="stripe")``): its state (``closed``,
``open``, ``half_open``), the failures counted in the current window and when that window
started, when it opened and until when it cools down (the database's clock), who opened
it by hand and why (a manual open holds every job until closed by hand), the probe's job
and until when it holds the probe, and its history (times opened, probes sent, when it
last closed). Each change is one conditional ``UPDATE`` (``store/circuits.py``). A job an
open circuit holds is a waiting row with ``locked_by = 'circuit:<name>'`` (no column).

Revision ID: 0013_circuits
Revises: 0011_control
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0013_circuits"
down_revision = "0011_control"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "background_job_circuits",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("opened_at", UTC, nullable=True),
        sa.Column("reopen_at", UTC, nullable=True),
        sa.Column("opened_by", sa.String(255), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("opened_count", sa.Integer(), nullable=False),
        sa.Column("probes", sa.Integer(), nullable=False),
        sa.Column("probe_job_id", sa.String(255), nullable=True),
        sa.Column("probe_until", UTC, nullable=True),
        sa.Column("closed_at", UTC, nullable=True),
        sa.Column("updated_at", UTC, nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_started_at", UTC, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("background_job_circuits")
