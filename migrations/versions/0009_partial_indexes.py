"""background_jobs: five indexes hold only the rows they serve

Each status change writes a new version of the row into every index whose condition it
meets (a change of ``status`` is never a HOT update), so each index costs every claim and
every completion. Five indexes only ever serve rows with a value in their leading column:
they become partial (PostgreSQL and SQLite; MariaDB has no partial indexes and keeps them
whole):

- ``(concurrency_key, status)``: only jobs with a concurrency key;
- ``(owner_id, created_at)``, ``(error_type, created_at)``: only rows with an owner, an
  error;
- ``(finished_at)`` and the cleanup's ``(status, finished_at, id)``: only finished rows.

Their readers (an equality or a range on that column) imply the condition, so the same
plans serve them (``EXPLAIN`` in docs/operations.md). A claim of a job with no key and
no owner now writes 8 index entries instead of 13, its completion 10 instead of 13.
Rebuilding them reads the table once per index, in the migration's transaction: writes
to the table wait meanwhile (22 s at 10M rows on this 2-core machine, the table in the OS
cache; the downgrade 39 s).

Revision ID: 0009_partial_indexes
Revises: 0008_not_before
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_partial_indexes"
down_revision = "0008_not_before"
branch_labels = None
depends_on = None

#: name → (columns, the rows it keeps)
PARTIAL: dict[str, tuple[list[str], str]] = {
    "ix_background_jobs_concurrency_key_status": (
        ["concurrency_key", "status"],
        "concurrency_key IS NOT NULL",
    ),
    "ix_background_jobs_owner_id_created_at": (["owner_id", "created_at"], "owner_id IS NOT NULL"),
    "ix_background_jobs_error_type_created_at": (
        ["error_type", "created_at"],
        "error_type IS NOT NULL",
    ),
    "ix_background_jobs_finished_at": (["finished_at"], "finished_at IS NOT NULL"),
    "ix_background_jobs_status_finished_at": (
        ["status", "finished_at", "id"],
        "finished_at IS NOT NULL",
    ),
}


def _rebuild(partial: bool) -> None:
    if op.get_bind().dialect.name not in ("postgresql", "sqlite"):
        return  # MariaDB, MySQL: no partial indexes
    with op.batch_alter_table("background_jobs") as batch:
        for name, (columns, where) in PARTIAL.items():
            batch.drop_index(name)
            condition = {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}
            batch.create_index(name, columns, **(condition if partial else {}))


def upgrade() -> None:
    _rebuild(partial=True)


def downgrade() -> None:
    _rebuild(partial=False)
