"""Engines per process, and driver errors translated at the edge.

A pooled connection must never cross a fork (Celery's prefork pool forks after the app is
imported), so engines are created lazily in the process that uses them; an inherited set is
dropped without closing the parent's sockets.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event

from .fastpath import FastPath, async_commit_options


class Engines:
    """This process's engines: ``durable`` (every commit waits for the disk) and ``fast``
    (on PostgreSQL, ``synchronous_commit=off``: for writes whose loss only lets a job run
    again), plus the PostgreSQL fast path when the driver is psycopg."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_postgres = url.startswith("postgresql")
        self._pid = 0
        self._lock = threading.Lock()
        self.durable: Engine
        self.fast: Engine
        self.fastpath: FastPath | None = None

    def get(self) -> Engines:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._create()
        return self

    def _create(self) -> None:
        if self._pid:  # inherited from the parent: drop without closing its sockets
            if self.fastpath is not None:
                self.fastpath.abandon()
            self.durable.dispose(close=False)
            if self.fast is not self.durable:
                self.fast.dispose(close=False)
        self.fastpath = None
        if self.is_postgres:
            self.durable = create_engine(self.url, isolation_level="AUTOCOMMIT", pool_size=2)
            _, params = self.durable.dialect.create_connect_args(self.durable.url)
            self.fast = create_engine(
                self.url,
                isolation_level="AUTOCOMMIT",
                pool_size=2,
                connect_args={"options": async_commit_options(params)},
            )
            if self.durable.dialect.driver == "psycopg":
                params.pop("context", None)
                self.fastpath = FastPath(params, self.durable.dialect)
        else:
            self.durable = create_engine(self.url)
            if self.durable.dialect.name == "sqlite":
                event.listen(self.durable, "connect", _sqlite_pragmas)
            self.fast = self.durable
        self._pid = os.getpid()

    @contextmanager
    def transaction(self, durable: bool = True) -> Iterator[Connection]:
        """One transaction (also on the autocommit engines of PostgreSQL)."""
        engine = self.get().durable if durable else self.get().fast
        with engine.connect() as conn:
            if self.is_postgres:
                conn = conn.execution_options(isolation_level="READ COMMITTED")
            with conn.begin():
                yield conn

    def execute(self, statement: Any, params: Mapping[str, Any], durable: bool = True) -> Any:
        """One statement on its own (autocommit on PostgreSQL, else its own transaction);
        returns the first row, or None."""
        with self.transaction(durable) as conn:
            result = conn.execute(statement, dict(params))
            return result.first() if result.returns_rows else None

    def dispose(self) -> None:
        if self._pid == os.getpid():
            if self.fastpath is not None:
                self.fastpath.close()
            self.durable.dispose()
            if self.fast is not self.durable:
                self.fast.dispose()
        self._pid = 0


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout = 30000")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.close()
