"""Issue 12, item 6: behind PgBouncer in transaction pooling mode WITHOUT
``tracked_database_pooler``, no client ever runs another client's prepared statement.

psycopg names a connection's prepared statements ``_pg3_0``, ``_pg3_1``, ...; behind a
transaction pooler each transaction may land on a server connection where another
client prepared a different statement under that name. The store's statements include
several of equal parameter counts (claim, fail and replace: 16; renew and log line: 6;
release and progress: 8), so a collision could run the wrong statement without an error.
Server-side prepares are therefore used only on a connection proven direct.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from celery import Celery
from sqlalchemy import create_engine, select, text
from sqlalchemy.dialects.postgresql import psycopg as pg_dialect
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from celery_tracked import Tracker, tracked_task
from celery_tracked.core.fences import AttemptError, Completion, Lease
from celery_tracked.core.jobs import utcnow
from celery_tracked.store import JobStore
from celery_tracked.store.fastpath import prepare_only_if_direct

from ..private_services import private_pgbouncer
from .conftest import insert_job

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.own_pgbouncer]

PROCESSES = 3
THREADS = 4
JOBS = 32  # per thread: every statement runs more than psycopg's 5 before it prepares


@pytest.fixture
def bounced_url(pg_database_url: str) -> Iterator[str]:
    """The test's database through a private PgBouncer in transaction pooling mode with 3
    server connections (many clients share them: every transaction may move)."""
    with private_pgbouncer(pool_size=3) as port:
        url = make_url(pg_database_url).set(port=port)
        yield url.render_as_string(hide_password=False)


def _client(database_url: str, redis_url: str, name: str, results: Any) -> None:
    """One process: THREADS clients, each running every kind of job JOBS/4 times."""
    app = Celery(f"pooled-{name}", broker=redis_url, set_as_current=False)
    app.conf.tracked_database_url = database_url  # and no tracked_database_pooler
    app.conf.tracked_redis_url = redis_url
    app.conf.tracked_relay_interval_seconds = 0

    @tracked_task(app=app, name="pooled.job", queue="pooled")
    def job(n: int, tag: str) -> None: ...

    tracker = Tracker.for_app(app)
    outcome: dict[str, Any] = {"jobs": {}, "errors": []}
    lock = threading.Lock()

    def one_client(tag: str, first: str) -> None:
        try:
            job_id = job.enqueue(n=-1, tag=tag).job_id
            warmed = _warm_up(tracker._services.store, job_id, tag, first)
            with lock:
                outcome["jobs"][job_id] = warmed
            for n in range(JOBS):
                job_id = job.enqueue(n=n, tag=tag).job_id
                read = tracker.get_job(job_id)  # the engine's statements
                assert read is not None and read.id == job_id, (job_id, read)
                expected = _run(tracker._services.store, job_id, n, tag)
                with lock:
                    outcome["jobs"][job_id] = expected
        except BaseException as exc:  # reported to the test
            with lock:
                outcome["errors"].append(f"{tag}: {type(exc).__name__}: {exc}")

    threads = [
        threading.Thread(target=one_client, args=(f"{name}.{t}", FIRST[t % len(FIRST)]))
        for t in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tracker.close()
    results.put(outcome)


#: The statement each client of a process runs often first, so that its connection's
#: first prepared statement (``_pg3_0`` on today's main) differs from its neighbours' with
#: the same parameter count (renew and log line: 6; progress and release: 8).
FIRST = ("renew", "log_line", "progress", "release")


def _warm_up(store: JobStore, job_id: str, tag: str, first: str) -> dict[str, Any]:
    """Claim ``job_id``, run ``first`` 8 times, complete it; what its row must be."""
    now = utcnow()
    c = store.claim(job_id, Lease(owner=tag, worker=tag, now=now, lease_s=60))
    assert c is not None and c.job_id == job_id
    for _ in range(8):
        if first == "renew":
            assert store.renew(c, 60)
        elif first == "log_line":
            assert store.log_line(c, message=job_id, now=now)
        elif first == "progress":
            assert store.report_progress(c, percent=7, stage=job_id, now=now)
        else:
            assert store.release(c, now)
    assert store.complete(c, Completion(result_json=json.dumps(job_id), now=now, duration_ms=0))
    logs = ["log"] * 8 if first == "log_line" else []
    stage = job_id if first == "progress" else None
    return {"payload": {"n": -1, "tag": tag}, "status": "completed", "error_message": None,
            "progress": 100, "stage": stage, "result": job_id,
            "events": ["enqueued", "started", *logs, "completed"]}  # fmt: skip


def _run(store: JobStore, job_id: str, n: int, tag: str) -> dict[str, Any]:
    """The worker-side statements of one job, one of four endings; what its row and
    history must then be."""
    now = utcnow()
    kind = n % 4
    row: dict[str, Any] = {"payload": {"n": n, "tag": tag}, "error_message": job_id}
    if kind == 3:
        assert store.cancel(job_id, now=now, reason=job_id)
        assert store.claim(job_id, Lease(owner=tag, worker=tag, now=now, lease_s=60)) is None
        return {**row, "status": "cancelled", "events": ["enqueued", "cancelled"]}
    c = store.claim(job_id, Lease(owner=tag, worker=tag, now=now, lease_s=60))
    assert c is not None and c.job_id == job_id and c.attempt == 1
    assert store.renew(c, 60)
    assert store.report_progress(c, percent=n, stage=job_id, now=now)
    assert store.log_line(c, message=job_id, now=now)
    row.update(progress=n, stage=job_id)
    events = ["enqueued", "started", "log"]
    if kind == 0:
        assert store.complete(c, Completion(result_json=json.dumps(job_id), now=now, duration_ms=n))
        return {**row, "status": "completed", "progress": 100, "error_message": None,
                "result": job_id, "events": [*events, "completed"]}  # fmt: skip
    if kind == 1:
        assert store.retrying(
            c,
            AttemptError(error_type="E", error_message=job_id, duration_ms=n, now=now),
            delay_ms=0,
        )
        return {**row, "status": "retrying", "events": [*events, "retrying"]}
    assert store.release(c, now)
    assert store.fail(c, AttemptError(error_type="E", error_message=job_id, duration_ms=n, now=now))
    return {**row, "status": "failed", "events": [*events, "failed"]}


def test_many_clients_behind_pgbouncer_without_the_setting_run_only_their_own_statements(
    bounced_url: str, pg_database_url: str, redis_url: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_client, args=(bounced_url, redis_url, f"p{i}", results))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        outcomes = [results.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
        results.close()
        results.join_thread()
    assert [e for o in outcomes for e in o["errors"]] == []
    expected = {k: v for o in outcomes for k, v in o["jobs"].items()}
    assert len(expected) == PROCESSES * THREADS * (JOBS + 1)  # and a warm-up job each
    assert _rows(pg_database_url) == expected  # read directly, not through the pooler


def _rows(url: str) -> dict[str, dict[str, Any]]:
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        jobs = conn.execute(
            text(
                "SELECT id, status, payload_json, error_message, progress, stage, result_json "
                "FROM background_jobs"
            )
        ).all()
        events: dict[str, list[tuple[str, str | None]]] = {}
        for job_id, event, message in conn.execute(
            text("SELECT job_id, event, message FROM background_job_events ORDER BY id")
        ):
            events.setdefault(job_id, []).append((event, message))
    engine.dispose()
    rows = {}
    for job_id, status, payload, error_message, progress, stage, result in jobs:
        row: dict[str, Any] = {"payload": json.loads(payload)["kwargs"], "status": status}
        row["error_message"] = error_message
        if status != "cancelled":
            row.update(progress=progress, stage=stage)
        if result is not None:
            row["result"] = json.loads(result)
        # a log line's message is its job's id: a line written for another job shows here
        logs = [m for e, m in events.get(job_id, []) if e == "log"]
        assert set(logs) <= {job_id}, (job_id, logs)
        row["events"] = [e for e, _ in events.get(job_id, [])]
        rows[job_id] = row
    return rows


def test_a_direct_connection_keeps_prepared_statements(
    pg_database_url: str, bounced_url: str
) -> None:
    """Prepares stay on where they are safe (a direct session), off through the pooler,
    checked on the fast path's connections and the engine's alike."""
    dialect = pg_dialect.dialect()
    for url, direct in ((pg_database_url, True), (bounced_url, False)):
        conninfo = make_url(url).set(drivername="postgresql").render_as_string(False)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            assert prepare_only_if_direct(conn, dialect) is direct
            assert conn.prepare_threshold == (5 if direct else None)
        with psycopg.connect(conninfo) as conn:  # not in autocommit: left idle
            assert prepare_only_if_direct(conn, dialect) is direct
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        store = JobStore(url)
        try:
            with store.engines.get().engine.connect() as conn:
                assert conn.connection.dbapi_connection is not None
                threshold = conn.connection.dbapi_connection.prepare_threshold  # type: ignore[attr-defined]
                assert threshold == (5 if direct else None)
                for _ in range(6):
                    conn.execute(select(1).where(text("1 = :x")), {"x": 1})
                if direct:
                    prepared = conn.execute(text("SELECT count(*) FROM pg_prepared_statements"))
                    assert prepared.scalar_one() >= 1
        finally:
            store.dispose()


def test_a_read_never_runs_another_clients_prepared_statement(bounced_url: str) -> None:
    """Another application shares the pooler with psycopg's defaults: it prepares its own
    ``_pg3_0`` (one parameter, as ``Tracker.get_job``'s) inside a transaction while the
    tracker's reads run on another server connection; the tracker's next read lands on
    the first server connection (PgBouncer reuses the most recently released one). Had
    the tracker prepared its read, that read would run the other application's statement
    and return another job."""
    store = JobStore(bounced_url)  # no pooler setting
    try:
        mine, other = insert_job(store), insert_job(store)
        conninfo = make_url(bounced_url).set(drivername="postgresql").render_as_string(False)
        with psycopg.connect(conninfo, autocommit=True) as neighbour:
            with neighbour.transaction():
                for _ in range(7):  # prepared (as _pg3_0) from the 6th run on
                    neighbour.execute("SELECT * FROM background_jobs WHERE id <> %s", (mine,))
                for _ in range(7):  # meanwhile, on another server connection
                    assert _read(store, mine) == mine
            assert _read(store, mine) == mine, f"got job {other} instead"
    finally:
        store.dispose()


def _read(store: JobStore, job_id: str) -> str | None:
    job = store.get(job_id)
    return None if job is None else job.id
