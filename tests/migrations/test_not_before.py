"""Migration 0008 moves a ``retrying`` row's due time from ``locked_until`` to
``not_before`` (its lock cleared), leaves a run's lease alone, and the downgrade moves it
back; on PostgreSQL, SQLite and MariaDB."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert, select

from celery_tracked.store import migrate
from celery_tracked.store.models import UTCDateTime

BEFORE = "0007_finding_jobs"
DUE = datetime(2026, 11, 26, 12, 0, 5, 123456, tzinfo=timezone.utc)
LEASE = DUE + timedelta(seconds=30)


@pytest.fixture(params=["postgres", "sqlite", "mariadb"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'm.sqlite3'}"
    return str(request.getfixturevalue(f"{request.param}_url"))


def table(with_not_before: bool) -> Table:
    """The columns this test reads and writes, at either revision."""
    columns = [
        Column("id", String(36), primary_key=True),
        Column("queue_name", String(200)),
        Column("job_type", String(200)),
        Column("task_name", String(255)),
        Column("status", String(16)),
        Column("max_attempts", Integer),
        Column("attempts_made", Integer),
        Column("progress", Integer),
        Column("locked_by", String(255)),
        Column("locked_until", UTCDateTime),
        Column("created_at", UTCDateTime),
        Column("updated_at", UTCDateTime),
    ]
    if with_not_before:
        columns.append(Column("not_before", UTCDateTime))
    return Table("background_jobs", MetaData(), *columns)


def row(job_id: str, status: str, locked_by: str | None) -> dict[str, object]:
    return {
        "id": job_id,
        "queue_name": "q",
        "job_type": "t",
        "task_name": "t",
        "status": status,
        "max_attempts": 3,
        "attempts_made": 1,
        "progress": 0,
        "locked_by": locked_by,
        "locked_until": DUE if status == "retrying" else LEASE,
        "created_at": DUE,
        "updated_at": DUE,
    }


def read(url: str, with_not_before: bool) -> dict[str, tuple[object, ...]]:
    jobs = table(with_not_before)
    columns = [jobs.c.id, jobs.c.locked_by, jobs.c.locked_until]
    if with_not_before:
        columns.append(jobs.c.not_before)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {r[0]: tuple(r[1:]) for r in conn.execute(select(*columns))}
    finally:
        engine.dispose()


def test_a_retrying_rows_due_time_moves_to_not_before_and_back(url: str) -> None:
    migrate.upgrade(url, BEFORE)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(table(False)),
                [
                    row("retrying", "retrying", None),
                    row("running", "processing", "host:1:2"),
                    row("relayed", "pending", "relay:host:1:2:ab"),
                ],
            )
    finally:
        engine.dispose()

    migrate.upgrade(url)
    assert read(url, with_not_before=True) == {
        "retrying": (None, None, DUE),  # due at not_before, held by nobody
        "running": ("host:1:2", LEASE, None),  # a run's lease stays where it was
        "relayed": ("relay:host:1:2:ab", LEASE, None),  # so does the relay's claim
    }

    migrate.downgrade(url, BEFORE)
    assert read(url, with_not_before=False) == {
        "retrying": (None, DUE),
        "running": ("host:1:2", LEASE),
        "relayed": ("relay:host:1:2:ab", LEASE),
    }
