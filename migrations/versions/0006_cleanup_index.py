"""background_jobs index (status, finished_at, id): the retention cleanup's batches

The cleanup (``celery_tracked.cleanup``) removes ended rows of one status, oldest
``finished_at`` first, in keyset batches; this index answers each batch with a range scan
that stops after the batch's rows.

Revision ID: 0006_cleanup_index
Revises: 0005_retries_exhausted
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0006_cleanup_index"
down_revision = "0005_retries_exhausted"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_background_jobs_status_finished_at",
        "background_jobs",
        ["status", "finished_at", "id"],
    )


def downgrade() -> None:
    op.drop_index("ix_background_jobs_status_finished_at", table_name="background_jobs")
