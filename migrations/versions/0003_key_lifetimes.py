"""background_jobs.key_round and .revision: key lifetimes, debounce and Tracker.retry

``key_round`` numbers the jobs that held one idempotency key in turn (0 for the first):
a task whose key frees again (``key_lifetime`` "ended", "throttle", "debounce") creates
round n+1 once round n let it go, and the unique constraint becomes
``(job_type, idempotency_key, key_round)``, so two producers can never both create the
same round. With the default lifetime every job is round 0: one job per key, as before.

``revision`` counts the times a job's message was replaced (a debounce that replaced its
arguments, a ``Tracker.retry``); a delivery of an older revision runs nothing.

Revision ID: 0003_key_lifetimes
Revises: 0002_published_at
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_key_lifetimes"
down_revision = "0002_published_at"
branch_labels = None
depends_on = None

UNIQUE = "uq_background_jobs_idempotency"


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("key_round", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("revision", sa.Integer, nullable=False, server_default="0"))
        batch.drop_constraint(UNIQUE, type_="unique")
        batch.create_unique_constraint(UNIQUE, ["job_type", "idempotency_key", "key_round"])


def downgrade() -> None:
    # fails if a key has more than one job (rounds): delete the older rounds first
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_constraint(UNIQUE, type_="unique")
        batch.create_unique_constraint(UNIQUE, ["job_type", "idempotency_key"])
        batch.drop_column("revision")
        batch.drop_column("key_round")
