"""Tenants (issue 27, item 2)

- ``background_jobs.tenant``: the job's tenant, from the task's ``tenant=`` option (a
  template over the call's arguments, or a callable), written once at the insert; NULL: the
  task declares none.
- ``ix_background_jobs_tenant_created_at`` on ``(tenant, created_at)``: ``Tracker.jobs``
  filtered by tenant, newest first, as the owner's index serves ``owner_id``. Partial on
  PostgreSQL and SQLite (a job without a tenant never enters it); MariaDB indexes every
  row. Neither column is ever updated, so every update on the hot path (the enqueue's
  hand-over mark of ``published_at``, the claim, the outcome) stays as HOT as before on
  PostgreSQL.

Revision ID: 0012_tenants
Revises: 0011_control
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_tenants"
down_revision = "0011_control"
branch_labels = None
depends_on = None

HAS_TENANT = "tenant IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.add_column(sa.Column("tenant", sa.String(255), nullable=True))
        batch.create_index(
            "ix_background_jobs_tenant_created_at",
            ["tenant", "created_at"],
            postgresql_where=sa.text(HAS_TENANT),
            sqlite_where=sa.text(HAS_TENANT),
        )


def downgrade() -> None:
    with op.batch_alter_table("background_jobs") as batch:
        batch.drop_index("ix_background_jobs_tenant_created_at")
        batch.drop_column("tenant")
