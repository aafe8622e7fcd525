"""Every SQL statement celery-tracked runs. Knows nothing of Celery.

Each status change is one conditional ``UPDATE`` (``WHERE status IN (...)`` and, for the
outcome of a run, the attempt number the run claimed with: the fence). Driver errors are
translated to :class:`~celery_tracked.errors.StoreError` here, at the edge.

On PostgreSQL the two statements of the worker's hot path (claim, completion) are single
round trips: a data-modifying CTE updates the row and appends the event in one statement,
on autocommit connections. The claim runs with ``synchronous_commit=off`` (losing it in a
server crash only makes the job run again); the completion is always durable.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar, cast

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from .errors import StoreError, mask_url
from .jobs import Job, JobEvent, JobStatus
from .models import events, jobs

#: A callable run inside the completion transaction (pipelines insert successors here).
Joiner = Callable[[Connection], None]

CLAIMABLE = (JobStatus.PENDING.value, JobStatus.RETRYING.value)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Claim:
    """A run's hold on a job: the attempt number is the fence for its outcome."""

    job_id: str
    attempt: int
    max_attempts: int
    takeover: bool = False


class DuplicateJob(Exception):
    """Internal: the insert hit the unique key or the primary key."""


class _Disconnected(StoreError):
    """The statement failed because its pooled connection was dead (now discarded)."""


F = TypeVar("F", bound=Callable[..., Any])


def _reconnecting(method: F) -> F:
    """Run ``method`` once more on a fresh connection when the first one was dead.

    Not used for the completion: a completion whose connection died is never re-sent in
    the same attempt; the attempt is retried instead.
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except _Disconnected:
            return method(*args, **kwargs)

    return cast(F, wrapper)


_INHERITED: list[Any] = []


class _ThreadConnections:
    """One thread's two hot-path connections, closed when the thread ends, but only by
    the process that opened them: a forked child (whose copies of other threads' locals
    are dropped at fork) must never end the parent's sessions."""

    __slots__ = ("__weakref__", "durable", "durable_used", "fast", "owned")

    def __init__(self) -> None:
        self.durable: Any = None
        self.fast: Any = None
        self.durable_used = 0.0
        self.owned: dict[str, Any] = {}  # the finaliser's view: never references the slot
        weakref.finalize(self, _close_owned, self.owned, os.getpid())

    def set(self, name: str, conn: Any) -> None:
        setattr(self, name, conn)
        if conn is None:
            self.owned.pop(name, None)
        else:
            self.owned[name] = conn


def _close_owned(owned: dict[str, Any], pid: int) -> None:
    if os.getpid() != pid:
        return
    for conn in list(owned.values()):
        with contextlib.suppress(Exception):
            conn.close()
    owned.clear()


class _HotPath:
    """Direct psycopg connections for the worker's two hot statements on PostgreSQL.

    The claim and the completion run once per job; through the ORM-free but still general
    SQLAlchemy execution path they cost about twice the client CPU of a plain driver call,
    which shows directly in throughput on small machines. Each thread keeps two autocommit
    connections (the claim's with ``synchronous_commit=off``); a connection that fails is
    dropped and the next call opens a new one.
    """

    def __init__(self, params: Mapping[str, Any]) -> None:
        self._params = dict(params)
        self._local = threading.local()
        self._opened: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()

    #: A durable connection idle this long is checked before a job's body runs.
    IDLE_CHECK_S = 5.0

    def _slot(self) -> _ThreadConnections:
        slot: _ThreadConnections | None = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = _ThreadConnections()
        return slot

    def check_idle_durable(self) -> None:
        """Before a body runs: if this thread's durable connection sat idle (a PostgreSQL
        restart, an idle timeout of a proxy or firewall may have closed it), ping it and
        drop it if dead, so the completion does not fail for a reason older than the job.
        A connection that dies while the body runs still fails the completion: that attempt
        is then retried, never reported done."""
        slot = self._slot()
        if slot.durable is None or time.monotonic() - slot.durable_used < self.IDLE_CHECK_S:
            return
        with contextlib.suppress(StoreError):  # a dead one is dropped: the completion reconnects
            self.execute(True, "SELECT 1", {})

    def execute(self, durable: bool, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        import psycopg

        name = "durable" if durable else "fast"
        slot = self._slot()
        conn = getattr(slot, name)
        try:
            if conn is None or conn.closed:
                params_ = self._params if durable else _async_commit(self._params)
                conn = psycopg.connect(**params_, autocommit=True)
                slot.set(name, conn)
                with self._lock:
                    self._opened.add(conn)
            cursor = conn.execute(sql, params)
            row: tuple[Any, ...] | None = None if cursor.description is None else cursor.fetchone()
            if durable:
                slot.durable_used = time.monotonic()
            return row
        except psycopg.IntegrityError:
            raise DuplicateJob() from None
        except psycopg.Error as exc:
            if conn is not None and (conn.broken or isinstance(exc, psycopg.OperationalError)):
                conn.close()
                slot.set(name, None)
                raise _Disconnected(_first_line(exc)) from None
            raise StoreError(_first_line(exc)) from None

    def close(self) -> None:
        with self._lock:
            opened, self._opened = list(self._opened), weakref.WeakSet()
        for conn in opened:
            conn.close()
        self._local = threading.local()

    def abandon(self) -> None:
        """After a fork: keep the parent's connections referenced, never closed here
        (finalising them in the child would end the parent's sessions)."""
        _INHERITED.extend(self._opened)
        _INHERITED.append(self._local)
        self._opened = weakref.WeakSet()


def _async_commit(params: Mapping[str, Any]) -> dict[str, Any]:
    """Connection parameters with ``synchronous_commit=off`` added to any given options."""
    options = " ".join(filter(None, [params.get("options"), "-c synchronous_commit=off"]))
    return {**params, "options": options}


def _first_line(exc: BaseException) -> str:
    text = mask_url(str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _driver_sql(statement: str) -> str:
    """The same statement with psycopg's ``%(name)s`` placeholders."""
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", statement)


class _Engines:
    """Engines created per process: a pooled connection must never cross a fork."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pid = 0
        self._lock = threading.Lock()
        self.durable: Engine
        self.fast: Engine
        self.hot: _HotPath | None = None

    def get(self) -> _Engines:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._create()
        return self

    def _create(self) -> None:
        if self._pid:  # inherited from the parent: drop without closing its sockets
            if self.hot is not None:
                self.hot.abandon()
            self.durable.dispose(close=False)
            if self.fast is not self.durable:
                self.fast.dispose(close=False)
        if self.url.startswith("postgresql"):
            self.durable = create_engine(self.url, isolation_level="AUTOCOMMIT", pool_size=2)
            _, params = self.durable.dialect.create_connect_args(self.durable.url)
            self.fast = create_engine(
                self.url,
                isolation_level="AUTOCOMMIT",
                pool_size=2,
                connect_args={"options": _async_commit(params)["options"]},
            )
            if self.durable.dialect.driver == "psycopg":
                params.pop("context", None)
                self.hot = _HotPath(params)
        else:
            self.durable = create_engine(self.url)
            if self.durable.dialect.name == "sqlite":
                event.listen(self.durable, "connect", _sqlite_pragmas)
            self.fast = self.durable
        self._pid = os.getpid()

    def dispose(self) -> None:
        if self._pid == os.getpid():
            if self.hot is not None:
                self.hot.close()
            self.durable.dispose()
            if self.fast is not self.durable:
                self.fast.dispose()
        self._pid = 0


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout = 30000")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.close()


_PG_INSERT_SQL = """
WITH j AS (
  INSERT INTO background_jobs (id, queue_name, job_type, task_name, celery_task_id, status,
    payload_json, attempts_made, max_attempts, idempotency_key, correlation_id,
    parent_job_id, owner_id, progress, created_at, updated_at)
  VALUES (:id, :queue_name, :job_type, :task_name, :celery_task_id, :status,
    :payload_json, 0, :max_attempts, :idempotency_key, :correlation_id,
    :parent_job_id, :owner_id, 0, :created_at, :updated_at)
  RETURNING id)
INSERT INTO background_job_events (job_id, event, status, attempt, message, created_at)
SELECT id, 'enqueued', 'pending', 0, NULL, :created_at FROM j
"""

_PG_CLAIM_SQL = """
WITH j AS (
  UPDATE background_jobs SET status = 'processing', attempts_made = attempts_made + 1,
    started_at = COALESCE(started_at, :now), worker = :worker, locked_by = :owner,
    locked_until = :until, updated_at = :now
  WHERE id = :id AND status IN ('pending', 'retrying')
  RETURNING id, attempts_made, max_attempts),
e AS (
  INSERT INTO background_job_events (job_id, event, status, attempt, created_at)
  SELECT id, 'started', 'processing', attempts_made, :now FROM j)
SELECT attempts_made, max_attempts FROM j
"""

_PG_COMPLETE_SQL = """
WITH j AS (
  UPDATE background_jobs SET status = 'completed', result_json = :result_json,
    finished_at = :now, updated_at = :now, locked_by = NULL, locked_until = NULL,
    error_type = NULL, error_message = NULL, progress = 100
  WHERE id = :id AND status = 'processing' AND attempts_made = :attempt
  RETURNING id),
e AS (
  INSERT INTO background_job_events (job_id, event, status, attempt, duration_ms, created_at)
  SELECT id, 'completed', 'completed', :attempt, :duration_ms, :now FROM j)
SELECT count(*) FROM j
"""
_PG_INSERT = text(_PG_INSERT_SQL)
_PG_CLAIM = text(_PG_CLAIM_SQL)
_PG_COMPLETE = text(_PG_COMPLETE_SQL)
_PG_INSERT_DRIVER = _driver_sql(_PG_INSERT_SQL)
_PG_CLAIM_DRIVER = _driver_sql(_PG_CLAIM_SQL)
_PG_COMPLETE_DRIVER = _driver_sql(_PG_COMPLETE_SQL)


class JobStore:
    """The tracking database: one instance per app, engines per process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engines = _Engines(url)
        self.is_postgres = url.startswith("postgresql")

    # -- plumbing ---------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._engines.get().durable

    def dispose(self) -> None:
        self._engines.dispose()

    @contextmanager
    def _translate(self, action: str) -> Iterator[None]:
        try:
            yield
        except DuplicateJob:
            raise
        except SQLAlchemyError as exc:
            kind = StoreError
            if isinstance(exc, DBAPIError) and exc.connection_invalidated:
                kind = _Disconnected
            orig = getattr(exc, "orig", None)
            reason = mask_url(str(orig) if orig is not None else str(exc))
            reason = reason.strip().splitlines()[0] if reason.strip() else type(exc).__name__
            raise kind(f"{action} failed: {reason}") from None

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """One transaction on the durable engine (also when that engine autocommits)."""
        with self.engine.connect() as conn:
            if self.is_postgres:
                conn = conn.execution_options(isolation_level="READ COMMITTED")
            with conn.begin():
                yield conn

    # -- producer ---------------------------------------------------------------------

    def insert(self, row: Mapping[str, Any]) -> None:
        """Insert a pending job and its ``enqueued`` event, committed.

        A dead pooled connection gets one re-send on a fresh one; if that re-send finds
        this very row (same id and ``created_at``), the first send had committed.

        Raises:
            DuplicateJob: the id or ``(job_type, idempotency_key)`` already exists.
            StoreError: the database failed.
        """
        try:
            self._insert(row)
        except _Disconnected:
            try:
                self._insert(row)
            except DuplicateJob:
                mine = self.get(row["id"])
                if mine is None or mine.created_at != row["created_at"]:
                    raise
                # first send committed, its reply was lost: the row is ours

    def _insert(self, row: Mapping[str, Any]) -> None:
        with self._translate("inserting the job row"):
            try:
                if self.is_postgres:
                    engines = self._engines.get()
                    if engines.hot is not None:
                        engines.hot.execute(True, _PG_INSERT_DRIVER, row)
                        return
                    with engines.durable.connect() as conn:
                        conn.execute(_PG_INSERT, dict(row))
                    return
                with self._tx() as conn:
                    conn.execute(insert(jobs).values(**row))
                    conn.execute(
                        insert(events).values(
                            job_id=row["id"],
                            event="enqueued",
                            status=JobStatus.PENDING.value,
                            attempt=0,
                            created_at=row["created_at"],
                        )
                    )
            except IntegrityError:
                raise DuplicateJob() from None

    @_reconnecting
    def delete(self, job_id: str) -> None:
        """Remove a job and its history (used to undo an enqueue whose publish failed)."""
        with self._translate("deleting the job row"), self._tx() as conn:
            conn.execute(delete(events).where(events.c.job_id == job_id))
            conn.execute(delete(jobs).where(jobs.c.id == job_id))

    # -- reads ------------------------------------------------------------------------

    @_reconnecting
    def get(self, job_id: str) -> Job | None:
        with self._translate("reading the job"), self.engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).mappings().first()
        return None if row is None else Job.from_row(row)

    @_reconnecting
    def find_by_key(self, job_type: str, key: str) -> Job | None:
        stmt = select(jobs).where(jobs.c.job_type == job_type, jobs.c.idempotency_key == key)
        with self._translate("reading the job"), self.engine.connect() as conn:
            row = conn.execute(stmt).mappings().first()
        return None if row is None else Job.from_row(row)

    @_reconnecting
    def events(self, job_id: str) -> list[JobEvent]:
        stmt = select(events).where(events.c.job_id == job_id).order_by(events.c.id)
        with self._translate("reading the job history"), self.engine.connect() as conn:
            rows = conn.execute(stmt).mappings().all()
        return [JobEvent.from_row(r) for r in rows]

    @_reconnecting
    def stats(self, now: datetime | None = None) -> dict[str, dict[str, Any]]:
        """Counts per queue and status, and the age of the oldest pending job per queue."""
        now = now or utcnow()
        counts = select(jobs.c.queue_name, jobs.c.status, func.count()).group_by(
            jobs.c.queue_name, jobs.c.status
        )
        oldest = (
            select(jobs.c.queue_name, func.min(jobs.c.created_at))
            .where(jobs.c.status == JobStatus.PENDING.value)
            .group_by(jobs.c.queue_name)
        )
        with self._translate("reading queue statistics"), self.engine.connect() as conn:
            count_rows = conn.execute(counts).all()
            oldest_rows = conn.execute(oldest).all()
        out: dict[str, dict[str, Any]] = {}
        for queue, status, n in count_rows:
            entry = out.setdefault(queue, _empty_stats())
            entry["counts"][status] = n
            entry["total"] += n
        for queue, created in oldest_rows:
            if created is None:
                continue
            if created.tzinfo is None:
                created = created.replace(tzinfo=timezone.utc)
            out.setdefault(queue, _empty_stats())["oldest_pending_age_s"] = max(
                0.0, (now - created).total_seconds()
            )
        return out

    # -- worker -----------------------------------------------------------------------

    @_reconnecting
    def claim(
        self, job_id: str, *, owner: str, worker: str, now: datetime, until: datetime
    ) -> Claim | None:
        """pending | retrying → processing, taking the lease; None if not claimable."""
        params = {"id": job_id, "owner": owner, "worker": worker, "now": now, "until": until}
        with self._translate("claiming the job"):
            if self.is_postgres:
                engines = self._engines.get()
                if engines.hot is not None:
                    found = engines.hot.execute(False, _PG_CLAIM_DRIVER, params)
                    if found is not None:
                        engines.hot.check_idle_durable()
                else:
                    with engines.fast.connect() as conn:
                        found = conn.execute(_PG_CLAIM, params).first()
                return None if found is None else Claim(job_id, found[0], found[1])
            with self._tx() as conn:
                result = conn.execute(
                    update(jobs)
                    .where(jobs.c.id == job_id, jobs.c.status.in_(CLAIMABLE))
                    .values(**self._claim_values(owner, worker, now, until))
                )
                if result.rowcount != 1:
                    return None
                attempt, max_attempts = self._attempts(conn, job_id)
                self._event(conn, job_id, "started", JobStatus.PROCESSING, attempt, None, None, now)
        return Claim(job_id, attempt, max_attempts)

    @_reconnecting
    def take_over(
        self,
        job_id: str,
        *,
        seen_attempt: int,
        owner: str,
        worker: str,
        now: datetime,
        until: datetime,
        stale_owner: str | None,
        reason: str,
    ) -> Claim | None:
        """processing → processing for a new attempt, when the old lease expired or its
        owner is known dead. Fenced by the attempt number last seen."""
        lapsed = _lapsed(now, stale_owner)
        with self._translate("taking over the job"), self._tx() as conn:
            result = conn.execute(
                update(jobs)
                .where(
                    jobs.c.id == job_id,
                    jobs.c.status == JobStatus.PROCESSING.value,
                    jobs.c.attempts_made == seen_attempt,
                    jobs.c.attempts_made < jobs.c.max_attempts,
                    lapsed,
                )
                .values(**self._claim_values(owner, worker, now, until))
            )
            if result.rowcount != 1:
                return None
            attempt, max_attempts = self._attempts(conn, job_id)
            self._event(
                conn, job_id, "redelivered", JobStatus.PROCESSING, attempt, reason, None, now
            )
        return Claim(job_id, attempt, max_attempts, takeover=True)

    @_reconnecting
    def fail_lost(
        self,
        job_id: str,
        *,
        seen_attempt: int,
        now: datetime,
        stale_owner: str | None,
        message: str,
    ) -> bool:
        """processing → failed when the last attempt was lost: fenced like a takeover (the
        attempt last seen, and a lease that lapsed or whose owner is dead)."""
        with self._translate("saving the failure"), self._tx() as conn:
            if not _update_one(
                conn,
                [
                    jobs.c.id == job_id,
                    jobs.c.status == JobStatus.PROCESSING.value,
                    jobs.c.attempts_made == seen_attempt,
                    _lapsed(now, stale_owner),
                ],
                status=JobStatus.FAILED.value,
                error_type="WorkerLost",
                error_message=message,
                finished_at=now,
                updated_at=now,
                locked_by=None,
                locked_until=None,
            ):
                return False
            self._event(conn, job_id, "failed", JobStatus.FAILED, seen_attempt, message, None, now)
        return True

    @_reconnecting
    def cancel(self, job_id: str, *, now: datetime, reason: str) -> bool:
        """pending | retrying → cancelled. A running job is never interrupted."""
        with self._translate("cancelling the job"), self._tx() as conn:
            if not _update_one(
                conn,
                [jobs.c.id == job_id, jobs.c.status.in_(CLAIMABLE)],
                status=JobStatus.CANCELLED.value,
                finished_at=now,
                updated_at=now,
                error_type=None,
                error_message=reason,
            ):
                return False
            attempt = self._attempts(conn, job_id)[0]
            self._event(conn, job_id, "cancelled", JobStatus.CANCELLED, attempt, reason, None, now)
        return True

    def complete(
        self,
        claim: Claim,
        *,
        result_json: str | None,
        now: datetime,
        duration_ms: int,
        join: Sequence[Joiner] = (),
    ) -> bool:
        """processing → completed, fenced by the claim; ``join`` runs in the same
        transaction. False when the run no longer holds the lease."""
        params = {
            "id": claim.job_id,
            "attempt": claim.attempt,
            "result_json": result_json,
            "now": now,
            "duration_ms": duration_ms,
        }
        with self._translate("saving the completion"):
            if self.is_postgres and not join:
                engines = self._engines.get()
                if engines.hot is not None:
                    row = engines.hot.execute(True, _PG_COMPLETE_DRIVER, params)
                    return bool(row and row[0])
                with engines.durable.connect() as conn:
                    return bool(conn.execute(_PG_COMPLETE, params).scalar_one())
            with self._tx() as conn:
                if self.is_postgres:
                    if not conn.execute(_PG_COMPLETE, params).scalar_one():
                        return False
                else:
                    done = self._finish(
                        conn,
                        claim,
                        JobStatus.COMPLETED,
                        now,
                        result_json=result_json,
                        error_type=None,
                        error_message=None,
                        progress=100,
                        finished_at=now,
                    )
                    if not done:
                        return False
                    self._event(
                        conn,
                        claim.job_id,
                        "completed",
                        JobStatus.COMPLETED,
                        claim.attempt,
                        None,
                        duration_ms,
                        now,
                    )
                for joiner in join:
                    joiner(conn)
        return True

    @_reconnecting
    def retrying(
        self,
        claim: Claim,
        *,
        error_type: str,
        error_message: str,
        delay_ms: int,
        duration_ms: int | None,
        now: datetime,
    ) -> bool:
        """processing → retrying after a failed attempt, fenced by the claim."""
        message = f"retry in {delay_ms} ms after {error_type}: {error_message}"
        with self._translate("saving the retry"), self._tx() as conn:
            done = self._finish(
                conn,
                claim,
                JobStatus.RETRYING,
                now,
                error_type=error_type,
                error_message=error_message,
            )
            if done:
                self._event(
                    conn,
                    claim.job_id,
                    "retrying",
                    JobStatus.RETRYING,
                    claim.attempt,
                    message[:1000],
                    duration_ms,
                    now,
                )
        return done

    @_reconnecting
    def fail(
        self,
        claim: Claim,
        *,
        error_type: str,
        error_message: str,
        duration_ms: int | None,
        now: datetime,
    ) -> bool:
        """processing → failed, fenced by the claim."""
        with self._translate("saving the failure"), self._tx() as conn:
            done = self._finish(
                conn,
                claim,
                JobStatus.FAILED,
                now,
                error_type=error_type,
                error_message=error_message,
                finished_at=now,
            )
            if done:
                self._event(
                    conn,
                    claim.job_id,
                    "failed",
                    JobStatus.FAILED,
                    claim.attempt,
                    f"{error_type}: {error_message}"[:1000],
                    duration_ms,
                    now,
                )
        return done

    @_reconnecting
    def renew(self, claims: Sequence[Claim], until: datetime) -> int:
        """Extend the leases of running attempts; returns how many were still held."""
        if not claims:
            return 0
        renewed = 0
        with self._translate("renewing leases"), self._engines.get().fast.begin() as conn:
            for claim in claims:
                result = conn.execute(
                    update(jobs)
                    .where(
                        jobs.c.id == claim.job_id,
                        jobs.c.status == JobStatus.PROCESSING.value,
                        jobs.c.attempts_made == claim.attempt,
                    )
                    .values(locked_until=until)
                )
                renewed += result.rowcount
        return renewed

    @_reconnecting
    def release(self, claim: Claim, now: datetime) -> bool:
        """Let the lease of an abandoned attempt lapse now, so a redelivery can take over."""
        with self._translate("releasing the lease"), self._tx() as conn:
            result = conn.execute(
                update(jobs)
                .where(
                    jobs.c.id == claim.job_id,
                    jobs.c.status == JobStatus.PROCESSING.value,
                    jobs.c.attempts_made == claim.attempt,
                )
                .values(locked_until=now, locked_by=None, updated_at=now)
            )
        return result.rowcount == 1

    # -- helpers ----------------------------------------------------------------------

    @staticmethod
    def _claim_values(owner: str, worker: str, now: datetime, until: datetime) -> dict[str, Any]:
        return {
            "status": JobStatus.PROCESSING.value,
            "attempts_made": jobs.c.attempts_made + 1,
            "started_at": func.coalesce(jobs.c.started_at, now),
            "worker": worker,
            "locked_by": owner,
            "locked_until": until,
            "updated_at": now,
        }

    @staticmethod
    def _attempts(conn: Connection, job_id: str) -> tuple[int, int]:
        row = conn.execute(
            select(jobs.c.attempts_made, jobs.c.max_attempts).where(jobs.c.id == job_id)
        ).one()
        return int(row[0]), int(row[1])

    @staticmethod
    def _finish(
        conn: Connection, claim: Claim, status: JobStatus, now: datetime, **values: Any
    ) -> bool:
        return _update_one(
            conn,
            [
                jobs.c.id == claim.job_id,
                jobs.c.status == JobStatus.PROCESSING.value,
                jobs.c.attempts_made == claim.attempt,
            ],
            status=status.value,
            updated_at=now,
            locked_by=None,
            locked_until=None,
            **values,
        )

    @staticmethod
    def _event(
        conn: Connection,
        job_id: str,
        name: str,
        status: JobStatus,
        attempt: int,
        message: str | None,
        duration_ms: int | None,
        now: datetime,
    ) -> None:
        conn.execute(
            insert(events).values(
                job_id=job_id,
                event=name,
                status=status.value,
                attempt=attempt,
                message=message,
                duration_ms=duration_ms,
                created_at=now,
            )
        )


def _update_one(conn: Connection, where: Sequence[Any], **values: Any) -> bool:
    """One conditional UPDATE of ``background_jobs``; True if it moved the row."""
    return bool(conn.execute(update(jobs).where(*where).values(**values)).rowcount == 1)


def _lapsed(now: datetime, stale_owner: str | None) -> Any:
    """The lease has expired, or its owner is known dead."""
    lapsed = jobs.c.locked_until < now
    if stale_owner is not None:
        lapsed = lapsed | (jobs.c.locked_by == stale_owner)
    return lapsed


def _empty_stats() -> dict[str, Any]:
    return {"counts": {s.value: 0 for s in JobStatus}, "total": 0, "oldest_pending_age_s": None}
