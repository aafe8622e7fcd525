"""Engines per process, and driver errors translated at the edge.

A pooled connection must never cross a fork (Celery's prefork pool forks after the app is
imported), so engines are created lazily in the process that uses them; an inherited set is
dropped without closing the parent's sockets. The lock that guards the creation is made
anew in a forked child: a child forked while another thread of its parent held it (the
worker's time-limit thread creating the engines) would otherwise wait on it forever.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event

from ..core.printable import storable_params
from .fastpath import FastPath, prepare_only_if_direct

if TYPE_CHECKING:
    from ..core.jobs import NewRow
    from .statements import Move

#: Every ``Engines`` of the process, to renew their locks in a forked child.
_ALL: weakref.WeakSet[Engines] = weakref.WeakSet()


def _renew_locks() -> None:
    for engines in list(_ALL):
        engines.renew_lock()


os.register_at_fork(after_in_child=_renew_locks)


class Engines:
    """This process's engine, plus the PostgreSQL fast path when the driver is psycopg.

    How durably a write commits is part of its statement (``statements.commit_mode``), not
    of the connection, and no connection carries libpq startup ``options``: PgBouncer in
    transaction pooling mode refuses them. psycopg's server-side prepared statements are
    used only on a connection known to be direct: ``pooled`` (behind a transaction pooler)
    turns them off; otherwise each new connection is checked
    (``fastpath.prepare_only_if_direct``), whatever the settings say.
    """

    def __init__(self, url: str, pooled: bool = False) -> None:
        self.url = url
        self.pooled = pooled
        self.is_postgres = url.startswith("postgresql")
        self._pid = 0
        self._lock = threading.Lock()
        self.engine: Engine
        self.fastpath: FastPath | None = None
        _ALL.add(self)

    def renew_lock(self) -> None:
        """A new creation lock (in a forked child: the parent's may be held by a thread
        that does not exist here)."""
        self._lock = threading.Lock()

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
            self.engine.dispose(close=False)
        self.fastpath = None
        if self.is_postgres:
            connect_args = {"prepare_threshold": None} if self.pooled else {}
            self.engine = create_engine(
                self.url,
                isolation_level="AUTOCOMMIT",
                pool_size=2,
                connect_args=connect_args,
                hide_parameters=True,
            )
            if self.engine.dialect.driver == "psycopg":
                if not self.pooled:  # the fast path checks its own connections
                    dialect = self.engine.dialect
                    event.listen(
                        self.engine,
                        "connect",
                        lambda conn, _: prepare_only_if_direct(conn, dialect),
                    )
                _, params = self.engine.dialect.create_connect_args(self.engine.url)
                params.pop("context", None)
                self.fastpath = FastPath({**params, **connect_args}, self.engine.dialect)
        else:
            self.engine = create_engine(self.url, hide_parameters=True)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas)
        event.listen(self.engine, "before_cursor_execute", _storable, retval=True)
        self._pid = os.getpid()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction (also on the autocommit engine of PostgreSQL), after this
        thread's write sent without waiting was answered (``FastPath.settle``): a thread
        reads its own writes."""
        engines = self.get()
        if engines.fastpath is not None:
            engines.fastpath.settle()
        with engines.engine.connect() as conn:
            if self.is_postgres:
                conn = conn.execution_options(isolation_level="READ COMMITTED")
            with conn.begin():
                yield conn

    def execute(self, statement: Any, params: Mapping[str, Any]) -> Any:
        """One statement on its own (autocommit on PostgreSQL, else its own transaction);
        returns the first row, or None."""
        with self.transaction() as conn:
            result = conn.execute(statement, dict(params))
            return result.first() if result.returns_rows else None

    def dispose(self) -> None:
        if self._pid == os.getpid():
            if self.fastpath is not None:
                self.fastpath.close()
            self.engine.dispose()
        self._pid = 0


def _storable(
    _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool
) -> tuple[str, Any]:
    """Every text the library writes made storable (``core.printable.storable``): a lone
    surrogate or NUL in an error message, stage, event or log line is saved escaped
    instead of failing the write."""
    return statement, storable_params(parameters)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout = 30000")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.close()


class Applying:
    """A part of :class:`~celery_tracked.store.JobStore` that reads through its
    ``engines`` and writes through ``Apply.apply`` (declared here for the type checker)."""

    engines: Engines

    if TYPE_CHECKING:  # provided by ``Apply``

        def apply(
            self,
            move: Move,
            params: Mapping[str, Any],
            rows: Sequence[NewRow] = (),
            key: str | None = None,
        ) -> tuple[int, int] | None: ...
