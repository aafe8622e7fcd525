"""The store contract suite: one ``store`` fixture, five backends.

Every test in this folder runs against the in-memory store and the SQL store on SQLite (a
file), PostgreSQL through the psycopg fast path, PostgreSQL through SQLAlchemy Core (the
fast path turned off: the same statements, the general path), and MariaDB. A missing
service skips (or, with ``CI=true``, fails) its backend, as everywhere in the suite.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from celery_tracked.backends.memory import MemoryStore
from celery_tracked.core.fences import AttemptError, Completion, Lease, StallCutoffs
from celery_tracked.core.jobs import Claim, utcnow
from celery_tracked.core.ports import Store
from celery_tracked.store import JobStore, migrate
from tests.conftest import migrated_sqlite

BACKENDS = ["memory", "sqlite", "postgres-fastpath", "postgres-core", "mariadb"]
#: The statement a keyed claim takes its key's lock with, per backend (None: none needed).
KEY_LOCKS = {
    "memory": None,
    "sqlite": None,
    "postgres-fastpath": "pg_advisory_xact_lock",
    "postgres-core": "pg_advisory_xact_lock",
    "mariadb": "get_lock",
}
OWNER = "host-a:1:100"
WORKER = "w1@host-a"


class Backend:
    """A store under test, and what its SQL side ran (empty for memory)."""

    def __init__(self, name: str, store: Store) -> None:
        self.name = name
        self.store = store
        self.statements: list[str] = []

    def record(self, sql: JobStore) -> None:
        """Record every statement the SQL store's engine sends (not the fast path's)."""

        def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            self.statements.append(statement)

        event.listen(sql.engines.get().engine, "before_cursor_execute", seen)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    name = request.param
    if name == "memory":
        yield Backend(name, MemoryStore())
        return
    if name == "sqlite":  # a copy of a migrated file
        url = migrated_sqlite(
            request.getfixturevalue("sqlite_template"), tmp_path / "contract.sqlite3"
        )
    elif name == "mariadb":
        url = request.getfixturevalue("mariadb_url")
        migrate.upgrade(url)
    else:  # a copy of a migrated template database
        url = request.getfixturevalue("pg_database_url")
    sql = JobStore(url)
    if name == "postgres-core":
        sql.engines.get().fastpath = None
    elif name == "postgres-fastpath":
        assert sql.engines.get().fastpath is not None, "psycopg: the fast path is on"
    found = Backend(name, sql)
    found.record(sql)
    try:
        yield found
    finally:
        sql.dispose()


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.store


def new_job(store: Store, **values: Any) -> str:
    """Insert a pending job as a producer would (``values`` override); its id."""
    row = job_row(**values)
    store.insert(row)
    return str(row["id"])


def job_row(**values: Any) -> dict[str, Any]:
    """A producer's new row (``values`` override; ``now``: its creation time)."""
    job_id = str(values.pop("id", None) or uuid.uuid4())
    now = values.pop("now", None) or utcnow()
    row: dict[str, Any] = {
        "id": job_id,
        "queue_name": "q",
        "job_type": "t",
        "task_name": "app.t",
        "celery_task_id": job_id,
        "status": "pending",
        "payload_json": '{"args": [], "kwargs": {}}',
        "max_attempts": 3,
        "idempotency_key": None,
        "correlation_id": job_id,
        "parent_job_id": None,
        "owner_id": None,
        "created_at": now,
        "updated_at": now,
    }
    return {**row, **values}


def claimed(store: Store, job_id: str, lease_s: float = 60, **kw: Any) -> Claim:
    """Claim ``job_id`` (it must be claimable)."""
    kw.setdefault("now", utcnow())
    claim = store.claim(job_id, Lease(kw.pop("owner", OWNER), WORKER, lease_s=lease_s, **kw))
    assert claim is not None, f"{job_id} was not claimable"
    return claim


def ago(seconds: float) -> datetime:
    return utcnow() - timedelta(seconds=seconds)


def later(seconds: float) -> datetime:
    return utcnow() + timedelta(seconds=seconds)


def event_names(store: Store, job_id: str) -> list[str]:
    return [e.event for e in store.events(job_id)]


def failure(now: datetime) -> AttemptError:
    return AttemptError(error_type="ValueError", error_message="smtp down", duration_ms=5, now=now)


def stalled(store: Store, **cutoffs: Any) -> list[tuple[str, int]]:
    args = {
        "grace_s": 0.0,
        "run_cutoff": later(60),
        "pending_cutoff": ago(3600),
        "retrying_cutoff": ago(3600),
    }
    args.update(cutoffs)
    return [(job.id, rescues) for job, rescues in store.stalled(StallCutoffs(**args), 10)]


def completed(store: Store, seconds_ago: float, **values: object) -> str:
    job_id = new_job(store, **values)
    claim = claimed(store, job_id)
    done = utcnow() - timedelta(seconds=seconds_ago)
    assert store.complete(claim, Completion(result_json=None, now=done, duration_ms=1))
    return job_id


def sealed(store: Store, job_id: str) -> str | None:
    job = store.get(job_id)
    assert job is not None
    return job.secrets_sealed
