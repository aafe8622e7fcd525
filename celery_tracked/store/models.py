"""Table definitions for ``background_jobs`` and ``background_job_events``.

SQLAlchemy Core tables with portable types (PostgreSQL, SQLite, MariaDB). The schema is
owned by the Alembic migrations in ``migrations/``; nothing here creates tables.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores naive UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name in ("mysql", "mariadb"):  # microseconds, not whole seconds
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(self.impl)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(timezone.utc)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)  # type: ignore[no-any-return]
        return value.astimezone(timezone.utc)  # type: ignore[no-any-return]


BigId = BigInteger().with_variant(Integer(), "sqlite")


def _only(condition: str) -> dict[str, Any]:
    """A partial index's condition (PostgreSQL, SQLite; MariaDB indexes every row). Each
    status change writes the row into every index whose condition it meets: an index
    that serves only rows with a value keeps out the rest (migration 0009)."""
    return {"postgresql_where": text(condition), "sqlite_where": text(condition)}


jobs = Table(
    "background_jobs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("queue_name", String(200), nullable=False),
    Column("job_type", String(200), nullable=False),
    Column("task_name", String(255), nullable=False),
    Column("celery_task_id", String(36), nullable=True),
    Column("status", String(16), nullable=False),
    Column("payload_json", Text, nullable=True),
    Column("result_json", Text, nullable=True),
    Column("error_type", String(200), nullable=True),
    Column("error_message", Text, nullable=True),
    Column("attempts_made", Integer, nullable=False, default=0),
    Column("max_attempts", Integer, nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    Column("correlation_id", String(64), nullable=True),
    Column("parent_job_id", String(36), nullable=True),
    Column("owner_id", String(255), nullable=True),
    Column("progress", Integer, nullable=False, default=0),
    Column("stage", String(200), nullable=True),
    Column("worker", String(255), nullable=True),
    # who holds the row, until when (the database's clock): a run's lease (``processing``),
    # or the relay's claim on a ``pending`` row it publishes; NULL: nobody
    Column("locked_by", String(255), nullable=True),
    Column("locked_until", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime, nullable=True),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("updated_at", UTCDateTime, nullable=False),
    # when the job's message was last handed to the broker (NULL: not yet, or its producer
    # died first; the relay publishes such a pending row after a grace period): by its
    # producer, the relay, the reaper, or a delivery postponed behind a limit that
    # re-publishes it (then on the database's clock; the reaper's sign of life). While the
    # relay publishes a pending row, ``locked_by``/``locked_until`` hold the relay's claim.
    Column("published_at", UTCDateTime, nullable=True),
    # the jobs that held one idempotency key in turn: 0, 1, 2... (always 0 with the default
    # key lifetime); two producers can never create the same round
    Column("key_round", Integer, nullable=False, default=0, server_default="0"),
    # bumped when the job's message is replaced (debounce, Tracker.retry): a delivery of an
    # older revision runs nothing
    Column("revision", Integer, nullable=False, default=0, server_default="0"),
    # a failed job used up its retries (else it was stopped: Unrecoverable, not retried)
    Column("retries_exhausted", Boolean, nullable=False, default=False, server_default=false()),
    # jobs sharing a concurrency key: at most the task's limit of them are ``processing``
    # under a live lease at once (``limits.py``); NULL: not limited
    Column("concurrency_key", String(255), nullable=True),
    # the jobs of one concurrency key take its freed slots in turn by this key
    # (round-robin, ``services/handoff.py``); NULL: not fair, first come first served
    Column("fairness_key", String(255), nullable=True),
    # ``Tracker.cancel(running=True)`` asked the running job to stop: its run then ends
    # ``cancelled`` whatever the body did (``CANCEL_RUN``, ``store/transitions.py``);
    # NULL: no request
    Column("cancel_requested_at", UTCDateTime, nullable=True),
    # the job must not start before this time (the database's clock): a ``retrying`` job's
    # backoff, a ``pending`` job's countdown/eta; no delivery claims it before, the reaper
    # never publishes it before; NULL when due at once (and once claimed)
    Column("not_before", UTCDateTime, nullable=True),
    # the values under redacted names, encrypted (tracked_secret_key; services/sealing.py)
    Column("secrets_sealed", Text, nullable=True),
    # the message's priority (Celery's ``priority``), kept by every re-publish; NULL: the
    # broker's default
    Column("priority", Integer),  # nullable (the default)
    # the job must start by then (the database's clock), else it ends ``cancelled``;
    # NULL: no deadline
    Column("deadline_at", UTCDateTime),  # nullable
    # the job's tenant (the task's ``tenant=`` option, ``core/tenants.py``), written once
    # at the insert; NULL: the task declares none
    Column("tenant", String(255)),  # nullable
    UniqueConstraint(
        "job_type", "idempotency_key", "key_round", name="uq_background_jobs_idempotency"
    ),
    Index("ix_background_jobs_created_at", "created_at"),
    Index("ix_background_jobs_queue_name_status", "queue_name", "status"),
    Index("ix_background_jobs_correlation_id", "correlation_id"),
    Index(
        "ix_background_jobs_concurrency_key_status",
        "concurrency_key",
        "status",
        **_only("concurrency_key IS NOT NULL"),
    ),
    # the cleanup's batches: one status, oldest finished first (``store/cleanup.py``)
    Index(
        "ix_background_jobs_status_finished_at",
        "status",
        "finished_at",
        "id",
        **_only("finished_at IS NOT NULL"),
    ),
    # ``Tracker.jobs`` lists newest first: each filter's column followed by ``created_at``
    # (they replace the single-column ``queue_name`` and ``status`` indexes, their
    # prefixes); ``finished_at`` serves finished ranges and the failures of the last hour.
    # EXPLAIN at 1M rows: docs/operations.md (``bench/jobs_query.py``).
    Index("ix_background_jobs_status_created_at", "status", "created_at"),
    Index("ix_background_jobs_queue_name_created_at", "queue_name", "created_at"),
    Index("ix_background_jobs_task_name_created_at", "task_name", "created_at"),
    Index(
        "ix_background_jobs_owner_id_created_at",
        "owner_id",
        "created_at",
        **_only("owner_id IS NOT NULL"),
    ),
    Index(
        "ix_background_jobs_error_type_created_at",
        "error_type",
        "created_at",
        **_only("error_type IS NOT NULL"),
    ),
    Index("ix_background_jobs_finished_at", "finished_at", **_only("finished_at IS NOT NULL")),
    # ``Tracker.jobs(tenant=...)``, newest first, as the owner's (migration 0012)
    Index(
        "ix_background_jobs_tenant_created_at",
        "tenant",
        "created_at",
        **_only("tenant IS NOT NULL"),
    ),
    # the rows with a due time, for the pass publishing the jobs held in the database; its
    # condition names ``not_before`` only, so the enqueue's hand-over mark stays a HOT
    # update (migration 0011)
    Index("ix_background_jobs_held_due", "not_before", **_only("not_before IS NOT NULL")),
)

events = Table(
    "background_job_events",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("job_id", String(36), nullable=False),
    Column("event", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempt", Integer, nullable=False, default=0),
    Column("message", Text, nullable=True),
    Column("duration_ms", Integer, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_background_job_events_job_id", "job_id", "id"),
)

# one row per paused queue, job type, or everything (``scope``: ``queue``, ``job_type``,
# ``all`` with name ``*``): who paused it, when (the database's clock), why; resuming
# deletes the row (migration 0011)
pauses = Table(
    "background_job_pauses",
    metadata,
    Column("scope", String(16), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("paused_at", UTCDateTime, nullable=False),
    Column("paused_by", String(255), nullable=True),
    Column("reason", Text, nullable=True),
)

# the action log: one row per action done by hand (the dashboard's retry, cancel, bulk
# actions, pause, resume, cleanup dry-run), its actor and role; read newest first by id
# (the primary key: no other index) (migration 0015)
actions = Table(
    "background_job_actions",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("actor", String(255), nullable=False),
    Column("role", String(32), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(255), nullable=False),
    Column("changed", Integer, nullable=False),
    Column("refused", Integer, nullable=False),
    Column("detail", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
)

# one row per circuit breaker (``core/circuits.py``, migration 0013): its state, the failures
# of the current window, when it opened and until when it cools down (the database's
# clock), who opened it by hand and why, its probe, and its history. The columns a
# counted failure's one UPDATE reads (``failures``, ``window_started_at``) come last: MySQL
# and MariaDB assign SET clauses left to right, and SQLAlchemy renders them in this order.
circuits = Table(
    "background_job_circuits",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("opened_at", UTCDateTime, nullable=True),
    Column("reopen_at", UTCDateTime, nullable=True),
    Column("opened_by", String(255), nullable=True),
    Column("reason", Text, nullable=True),
    Column("opened_count", Integer, nullable=False),
    Column("probes", Integer, nullable=False),
    Column("probe_job_id", String(255), nullable=True),
    Column("probe_until", UTCDateTime, nullable=True),
    Column("closed_at", UTCDateTime, nullable=True),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("window_started_at", UTCDateTime, nullable=True),
)

# one row per maintenance plugin (``core/maintenance.py``, migration 0016): its last pass
# (started, ended on the database's clock, its counts as JSON, the masked error of a pass
# that failed) and its running totals since its first recorded pass (``since``); one upsert
# per pass
maintenance = Table(
    "background_job_maintenance",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("started_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=False),
    Column("counts", Text, nullable=False),
    Column("jobs", Integer, nullable=False),
    Column("error", Text, nullable=True),
    Column("passes", BigInteger, nullable=False),
    Column("failures", BigInteger, nullable=False),
    Column("jobs_total", BigInteger, nullable=False),
    Column("since", UTCDateTime, nullable=False),
)
