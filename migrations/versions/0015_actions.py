"""The dashboard's action log (issue 28): ``background_job_actions``

One row per action done by hand (a retry, a cancel, a bulk action, a pause or resume, a
cleanup dry-run): who (``actor``, ``role``), what (``action``, ``target``), how many jobs it
changed and refused, why (``detail``), when (the database's clock). Read newest first by
its primary key, a page at a time (``id < :before``): no other index. Each job an action
changed also gets an ``action`` event in ``background_job_events``.

Why a table and not the events alone: pause, resume and a cleanup dry-run change no job
(no event to hang them on); a bulk action of 1,000 jobs is one entry, not 1,000; and a
newest-first page of the events of one kind at 10M events needs an index on
``(event, id)`` that every event insert would pay for.

Revision ID: 0015_actions
Revises: 0014_fairness
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015_actions"
down_revision = "0014_fairness"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "background_job_actions",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("changed", sa.Integer(), nullable=False),
        sa.Column("refused", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_background_job_actions"),
    )


def downgrade() -> None:
    op.drop_table("background_job_actions")
