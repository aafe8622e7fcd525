"""background_jobs.fairness_key: the jobs of one concurrency key take its slots in turn

A task declaring ``fairness_key`` (a template over the call's arguments, with a
``concurrency_key``) stores each job's fairness key here. When a job of a concurrency key
ends, its freed slot is handed to the next fairness key (in the keys' order) that has a
due job waiting (round-robin; ``services/handoff.py``). No index: the hand-off reads the
key's waiting jobs through ``ix_background_jobs_concurrency_key_status``.

Revision ID: 0014_fairness
Revises: 0013_circuits
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_fairness"
down_revision = "0013_circuits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("fairness_key", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_column("fairness_key")
