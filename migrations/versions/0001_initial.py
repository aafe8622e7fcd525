"""background_jobs and background_job_events

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = ("celery_tracked",)
depends_on = None

UTC = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "background_jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("queue_name", sa.String(200), nullable=False),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("task_name", sa.String(255), nullable=False),
        sa.Column("celery_task_id", sa.String(36), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("payload_json", sa.Text(), nullable=True),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("error_type", sa.String(200), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("attempts_made", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("correlation_id", sa.String(64), nullable=True),
        sa.Column("parent_job_id", sa.String(36), nullable=True),
        sa.Column("owner_id", sa.String(255), nullable=True),
        sa.Column("progress", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(200), nullable=True),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("locked_by", sa.String(255), nullable=True),
        sa.Column("locked_until", UTC, nullable=True),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("started_at", UTC, nullable=True),
        sa.Column("finished_at", UTC, nullable=True),
        sa.Column("updated_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_background_jobs"),
        sa.UniqueConstraint("job_type", "idempotency_key", name="uq_background_jobs_idempotency"),
    )
    op.create_index("ix_background_jobs_queue_name", "background_jobs", ["queue_name"])
    op.create_index("ix_background_jobs_status", "background_jobs", ["status"])
    op.create_index("ix_background_jobs_created_at", "background_jobs", ["created_at"])
    op.create_index(
        "ix_background_jobs_queue_name_status", "background_jobs", ["queue_name", "status"]
    )
    op.create_index("ix_background_jobs_correlation_id", "background_jobs", ["correlation_id"])
    op.create_table(
        "background_job_events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_background_job_events"),
    )
    op.create_index("ix_background_job_events_job_id", "background_job_events", ["job_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_background_job_events_job_id", table_name="background_job_events")
    op.drop_table("background_job_events")
    op.drop_index("ix_background_jobs_correlation_id", table_name="background_jobs")
    op.drop_index("ix_background_jobs_queue_name_status", table_name="background_jobs")
    op.drop_index("ix_background_jobs_created_at", table_name="background_jobs")
    op.drop_index("ix_background_jobs_status", table_name="background_jobs")
    op.drop_index("ix_background_jobs_queue_name", table_name="background_jobs")
    op.drop_table("background_jobs")
