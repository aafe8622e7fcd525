"""background_jobs: finding jobs at scale, and cancelling a running job

``cancel_requested_at``: ``Tracker.cancel(job_id, running=True)`` asked the job's running
attempt to stop; its run then ends ``cancelled`` (NULL: no request).

Indexes for ``Tracker.jobs`` (newest first, a keyset on ``(created_at, id)``) at 1M rows,
chosen from ``EXPLAIN (ANALYZE)`` (``bench/jobs_query.py``, docs/operations.md): the
composites ``(status, created_at)`` and ``(queue_name, created_at)`` replace the
single-column ``status`` and ``queue_name`` indexes (their prefixes serve the same
queries); ``task_name``, ``owner_id`` and ``error_type`` get one each, followed by
``created_at``; ``finished_at`` serves finished ranges and the failures of the last hour.

Revision ID: 0007_finding_jobs
Revises: 0006_cleanup_index
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007_finding_jobs"
down_revision = "0006_cleanup_index"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
#: name → columns: each filter of ``Tracker.jobs`` followed by ``created_at`` (newest
#: first from the index), and ``finished_at`` for finished ranges.
INDEXES: dict[str, list[str]] = {
    "ix_background_jobs_status_created_at": ["status", "created_at"],
    "ix_background_jobs_queue_name_created_at": ["queue_name", "created_at"],
    "ix_background_jobs_task_name_created_at": ["task_name", "created_at"],
    "ix_background_jobs_owner_id_created_at": ["owner_id", "created_at"],
    "ix_background_jobs_error_type_created_at": ["error_type", "created_at"],
    "ix_background_jobs_finished_at": ["finished_at"],
}
#: Replaced by the composites above, which start with their column.
REPLACED: dict[str, list[str]] = {
    "ix_background_jobs_status": ["status"],
    "ix_background_jobs_queue_name": ["queue_name"],
}


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("cancel_requested_at", UTC, nullable=True))
        for name, columns in INDEXES.items():
            batch.create_index(name, columns)
        for name in REPLACED:
            batch.drop_index(name)


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        for name, columns in REPLACED.items():
            batch.create_index(name, columns)
        for name in INDEXES:
            batch.drop_index(name)
        batch.drop_column("cancel_requested_at")
