"""Row locks a test holds in PostgreSQL to stop a real worker at a chosen point.

A test's own transaction takes a lock (``SELECT ... FOR UPDATE``, or an uncommitted
insert of a key); the worker's statement that needs it blocks until the test releases it.
A second, autocommit connection watches which backends wait on the holder, and whether
they are gone.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

#: How often a backend checks that its client is still connected while it runs (or waits
#: on a lock): without it, a statement of a killed process that waits on a lock still
#: runs, and commits, once the lock is released.
CHECK_CLIENT = "100ms"


def check_dead_clients(database_url: str) -> None:
    """Make the database's new sessions notice a dead client within ``CHECK_CLIENT``
    (``client_connection_check_interval``, PostgreSQL 14+) even while waiting on a lock."""
    name = make_url(database_url).database
    engine = create_engine(database_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            setting = f"client_connection_check_interval = '{CHECK_CLIENT}'"
            conn.execute(text(f'ALTER DATABASE "{name}" SET {setting}'))
    finally:
        engine.dispose()


class Hold:
    """One transaction of the test's, which takes locks until :meth:`release`."""

    def __init__(self, database_url: str) -> None:
        self.engine = create_engine(database_url, poolclass=NullPool)
        self.watch_engine = create_engine(
            database_url, poolclass=NullPool, isolation_level="AUTOCOMMIT"
        )
        self.conn: Connection = self.engine.connect()
        self.watch = self.watch_engine.connect()
        self.pid = self.conn.execute(text("SELECT pg_backend_pid()")).scalar_one()

    def __enter__(self) -> Hold:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
        self.watch.close()
        self.engine.dispose()
        self.watch_engine.dispose()

    def execute(self, statement: str, **params: Any) -> Any:
        """A statement in the holding transaction (its locks are kept until release)."""
        return self.conn.execute(text(statement), params)

    def lock_job(self, job_id: str) -> None:
        """``SELECT ... FOR UPDATE`` the job's row: its next UPDATE waits for us."""
        locked = self.execute(
            "SELECT id FROM background_jobs WHERE id = :job_id FOR UPDATE", job_id=job_id
        ).scalar_one_or_none()
        assert locked == job_id

    def waiting(self) -> list[int]:
        """The backends waiting on one of our locks."""
        rows = self.watch.execute(
            text("SELECT pid FROM pg_stat_activity WHERE :me = ANY(pg_blocking_pids(pid))"),
            {"me": self.pid},
        )
        return [int(pid) for pid in rows.scalars()]

    def gone(self, pids: list[int]) -> bool:
        """None of ``pids`` is a backend any more."""
        alive = self.watch.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)"), {"pids": pids}
        )
        return alive.scalar_one() == 0

    def scalar(self, statement: str, **params: Any) -> Any:
        """A query outside the holding transaction (sees what others committed)."""
        return self.watch.execute(text(statement), params).scalar()

    def release(self) -> None:
        """Roll the holding transaction back: its locks go, its writes too."""
        if not self.conn.closed:
            self.conn.rollback()
            self.conn.close()
