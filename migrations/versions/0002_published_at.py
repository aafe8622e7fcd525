"""background_jobs.published_at: whether the job's message was handed to the broker

Revision ID: 0002_published_at
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002_published_at"
down_revision = "0001"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("published_at", UTC, nullable=True))
    # rows from before: their message was published (or their producer was publishing it);
    # never hand them to the relay
    op.execute("UPDATE background_jobs SET published_at = created_at")


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_column("published_at")
