"""background_jobs.secrets_sealed: the values under redacted names, encrypted

With ``tracked_secret_key`` set, a job whose arguments hold values under redacted names
stores them encrypted (Fernet) here, beside its redacted ``payload_json``, so that the
relay, the reaper and ``Tracker.retry`` can send its message again as it was called
(``celery_tracked/services/sealing.py``). NULL on every other row (and on every row
written without a key). No index: it is only read with its row.

Revision ID: 0010_secrets_sealed
Revises: 0009_partial_indexes
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_secrets_sealed"
down_revision = "0009_partial_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("secrets_sealed", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_column("secrets_sealed")
