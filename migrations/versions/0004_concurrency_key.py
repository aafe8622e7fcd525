"""background_jobs.concurrency_key: per-key concurrency limits

A task declaring ``concurrency_key`` (a template over the call's arguments) stores each
job's key here; a claim succeeds only while fewer than the task's ``concurrency_limit``
jobs with that key are ``processing`` under a live lease. The slot is the job's own fenced
lease, so a worker that dies frees it when its lease lapses: no counter to leak. The index
``(concurrency_key, status)`` serves that count.

Revision ID: 0004_concurrency_key
Revises: 0003_key_lifetimes
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_concurrency_key"
down_revision = "0003_key_lifetimes"
branch_labels = None
depends_on = None

INDEX = "ix_background_jobs_concurrency_key_status"


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("concurrency_key", sa.String(255), nullable=True))
        batch.create_index(INDEX, ["concurrency_key", "status"])


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_index(INDEX)
        batch.drop_column("concurrency_key")
