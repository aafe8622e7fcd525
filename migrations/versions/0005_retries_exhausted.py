"""background_jobs.retries_exhausted: a failed job used up its retries

True when a job failed because its last attempt failed with an error its task retries (or
was lost, or killed by the hard time limit); False when it was stopped before that
(``Unrecoverable``, an error its task does not retry). A pipeline whose failed leaf used up
its retries is ``failed``; one stopped on purpose is ``halted``. Rows from before are
backfilled from their attempts, as the state was read until now.

Revision ID: 0005_retries_exhausted
Revises: 0004_concurrency_key
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_retries_exhausted"
down_revision = "0004_concurrency_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(
            sa.Column("retries_exhausted", sa.Boolean, nullable=False, server_default=sa.false())
        )
    op.execute(
        "UPDATE background_jobs SET retries_exhausted = (attempts_made >= max_attempts) "
        "WHERE status = 'failed'"
    )


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_column("retries_exhausted")
