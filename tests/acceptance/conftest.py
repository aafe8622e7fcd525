"""Acceptance fixtures: a per-test app configuration, real ``celery worker`` subprocesses.

Each test gets its own Redis DB (broker, guard and execution records) and its own migrated
PostgreSQL database. Workers run ``tracked_app`` from this folder, configured through the
environment, in their own process group; teardown terminates the whole group.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from tracked_app import DEFAULT_LEASE_SECONDS, QUEUE, WORKER_APPNAME, create_app
from waiting import REREAD_S

from celery_tracked import Tracker
from tests.conftest import _port_open, _require, pg_server, wait_for

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: The ``celery`` executable of this environment (``.venv/bin/celery``).
CELERY = str(Path(sys.executable).parent / "celery")
#: Set at the start of every test: if it is gone, something flushed the test's Redis DB.
SENTINEL = "acceptance:sentinel"


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    jsonl_path: Path
    _log_file: Any = field(repr=False, default=None)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def records(self) -> list[dict[str, Any]]:
        """The ``celery_tracked`` log records the worker wrote (JSON lines)."""
        if not self.jsonl_path.exists():
            return []
        return [json.loads(line) for line in self.jsonl_path.read_text().splitlines() if line]

    def records_of(self, job_id: str, status: str) -> list[dict[str, Any]]:
        """The ``extra`` fields of the records about ``job_id`` with this ``status``."""
        return [
            r["extra"]
            for r in self.records()
            if r["extra"].get("job_id") == job_id and r["extra"].get("status") == status
        ]

    def stop(self, graceful: bool = False) -> None:
        """End the worker and its pool children: killed at once (``SIGKILL`` to the
        process group) once the test's assertions are done; ``graceful=True`` for a test
        about shutdown (``SIGTERM``, Celery's warm shutdown, up to 10 s)."""
        if graceful and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        # the pool children share the group: make sure none survives
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


@dataclass
class Env:
    """One test's services, the in-process app and helpers to look at them."""

    config: dict[str, Any]
    app: Celery
    tracker: Tracker
    redis: redis.Redis
    database_url: str

    def task(self, name: str) -> Any:
        return self.app.tasks[name]

    def ran(self, job_id: str) -> int:
        """How many times the job's body ran."""
        value = self.redis.get(f"ran:{job_id}")
        if value is None:
            self.check_not_flushed()
        return int(value or 0)

    def check_not_flushed(self) -> None:
        assert self.redis.exists(SENTINEL), (
            "THE TEST'S REDIS DB WAS FLUSHED by another process (a concurrent pytest run: "
            "tests/conftest.py hands out Redis DBs 2-15 per process, not per host)"
        )

    def spans(self, job_id: str) -> list[tuple[int, float, float]]:
        out = []
        for raw in self.redis.lrange(f"spans:{job_id}", 0, -1):
            pid, start, end = raw.decode().split()
            out.append((int(pid), float(start), float(end)))
        return out

    def broker_messages(self, queue: str = QUEUE) -> list[dict[str, Any]]:
        """Messages waiting in the queue (kombu's Redis transport: a list of JSON)."""
        return [json.loads(m) for m in self.redis.lrange(queue, 0, -1)]

    def unacked(self) -> list[dict[str, Any]]:
        """Messages a worker holds without having acknowledged them (kombu ``unacked``)."""
        out = []
        for raw in self.redis.hvals("unacked"):
            message = json.loads(raw)
            out.append(message[0] if isinstance(message, list) else message)
        return out

    def sql(self, statement: str, **params: Any) -> list[Any]:
        engine = create_engine(self.database_url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                return list(conn.execute(text(statement), params).all())
        finally:
            engine.dispose()

    def redeliver(self, task_name: str, job_id: str, **kwargs: Any) -> None:
        """Publish the job's message again, as a broker redelivery would: same task id,
        same tracking headers, bypassing the tracked ``apply_async``."""
        self.app.send_task(
            task_name,
            args=(),
            kwargs=kwargs,
            task_id=job_id,
            headers={"tracked_job_id": job_id, "tracked_queue": QUEUE},
            queue=QUEUE,
        )

    def broker_empty(self) -> bool:
        return not self.broker_messages() and not self.unacked()

    def status(self, job_id: str) -> str | None:
        job = self.tracker.get_job(job_id)
        return None if job is None else job.status.value

    def wait_status(self, job_id: str, *statuses: str, timeout: float = 30.0) -> Any:
        try:
            wait_for(
                lambda: self.status(job_id) in statuses,
                timeout=timeout,
                what=f"job {job_id} to be {statuses}",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.diagnose(job_id)}") from None
        return self.tracker.get_job(job_id)

    def diagnose(self, job_id: str) -> str:
        """The job, its history and the broker's state, for a failure message."""
        history = "\n".join(
            f"  {e.event} {e.status.value} attempt={e.attempt} {e.created_at} {e.message}"
            for e in self.tracker.history(job_id)
        )
        queued = [m["headers"].get("id") for m in self.broker_messages()]
        unacked = [m.get("headers", {}).get("id") for m in self.unacked()]
        return (
            f"job: {self.tracker.get_job(job_id)!r}\nhistory:\n{history}\n"
            f"queued: {queued}\nunacked: {unacked}\nran: {self.ran(job_id)}\n"
            f"redis keys: {sorted(k.decode() for k in self.redis.keys('*'))}"
            + ("" if self.redis.exists(SENTINEL) else "\nTHE TEST'S REDIS DB WAS FLUSHED")
        )


@pytest.fixture
def slow_reread(monkeypatch: pytest.MonkeyPatch) -> float:
    """Raise ``Tracker.REREAD_S`` in this process (workers are others) to ``REREAD_S``: a
    wait that ends quickly was woken by a notification, never by its periodic re-read."""
    monkeypatch.setattr(Tracker, "REREAD_S", REREAD_S)
    return REREAD_S


@pytest.fixture
def lease_seconds() -> float:
    """``tracked_lease_seconds`` of the test's app and workers; a test may parametrize it."""
    return DEFAULT_LEASE_SECONDS


PGBOUNCER_PORT = int(os.environ.get("TEST_PGBOUNCER_PORT", "6439"))


@pytest.fixture
def database_route() -> str:
    """How the app and its workers reach PostgreSQL: ``direct``, or ``pgbouncer`` (a
    PgBouncer in transaction pooling mode, started by ``.ci/pgbouncer``). A test module
    runs through both with ``pytest.mark.parametrize("database_route", [...])``."""
    return "direct"


@pytest.fixture(scope="session")
def pgbouncer_port(postgres_available: None) -> Iterator[int]:
    """A PgBouncer in transaction pooling mode in front of the tests' PostgreSQL: a private
    one (free port) in front of the private cluster; with ``TEST_POSTGRES_URL``, the one
    ``.ci/pgbouncer`` started on ``TEST_PGBOUNCER_PORT`` (6439)."""
    server = pg_server()
    if server is None:
        _require(
            _port_open("127.0.0.1", PGBOUNCER_PORT), f"PgBouncer at 127.0.0.1:{PGBOUNCER_PORT}"
        )
        yield PGBOUNCER_PORT
        return
    from tests.private_services import private_pgbouncer

    with private_pgbouncer(upstream_port=server.port, pool_size=20) as port:
        yield port


@pytest.fixture
def routed(
    request: pytest.FixtureRequest, database_route: str, pg_database_url: str
) -> tuple[str, str | None]:
    """``(database URL, tracked_database_pooler)`` of the app and its workers."""
    if database_route == "direct":
        return pg_database_url, None
    port = request.getfixturevalue("pgbouncer_port")
    url = make_url(pg_database_url).set(port=port)
    return url.render_as_string(hide_password=False), "pgbouncer"


@pytest.fixture
def env(
    redis_url: str,
    pg_database_url: str,
    lease_seconds: float,
    routed: tuple[str, str | None],
) -> Iterator[Env]:
    config = {
        "broker": redis_url,
        "database_url": routed[0],
        "database_pooler": routed[1],
        "redis_url": redis_url,
        "record_url": redis_url,
        "lease_seconds": lease_seconds,
    }
    app = create_app(config)
    tracker = Tracker.for_app(app)
    client = redis.Redis.from_url(redis_url)
    client.set(SENTINEL, 1)
    try:
        yield Env(config, app, tracker, client, pg_database_url)
    finally:
        tracker.close()
        app.close()
        client.close()


def worker_environ(
    config: dict[str, Any],
    jsonl_path: Path | None = None,
    overrides: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """The environment of a process running ``tracked_app`` on the test's services;
    ``overrides`` set variables, or remove them when the value is None."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_TRACKED_", "TRACKED_TEST_")) and k != "REDIS_URL"
    }
    environ.update(
        {
            "TRACKED_TEST_BROKER": config["broker"],
            "CELERY_TRACKED_DATABASE_URL": config["database_url"],
            "CELERY_TRACKED_DATABASE_POOLER": config.get("database_pooler") or "none",
            "REDIS_URL": config["redis_url"],
            "TRACKED_TEST_RECORD_URL": config["record_url"],
            "TRACKED_TEST_LEASE_SECONDS": str(config["lease_seconds"]),
            "PGAPPNAME": WORKER_APPNAME,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if jsonl_path is not None:
        environ["TRACKED_TEST_LOG_JSONL"] = str(jsonl_path)
    for name, value in (overrides or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return environ


@pytest.fixture
def start_worker(env: Env, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start a real ``celery worker`` of ``app`` (``tracked_app`` unless said otherwise;
    prefork unless ``pool`` says otherwise) on the test's services; stopped at teardown."""
    started: list[Worker] = []

    def start(
        name: str = "w1",
        concurrency: int = 2,
        events: bool = False,
        ready: bool = True,
        environ: Mapping[str, str | None] | None = None,
        pool: str = "prefork",
        app: str = "tracked_app",
        queues: str = QUEUE,
    ) -> Worker:
        log_path = tmp_path / f"worker-{name}.log"
        jsonl_path = tmp_path / f"worker-{name}.jsonl"
        log_file = log_path.open("wb")
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            "-P",
            pool,
            "-c",
            str(concurrency),
            "-Q",
            queues,
            "-n",
            f"{name}@%h",
            "-l",
            "info",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ]
        if events:
            cmd.append("-E")
        proc = subprocess.Popen(
            cmd,
            cwd=str(HERE),
            env=worker_environ(env.config, jsonl_path, environ),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        worker = Worker(name, proc, log_path, jsonl_path, log_file)
        started.append(worker)
        if ready:
            wait_for(
                lambda: " ready." in worker.log() or proc.poll() is not None,
                timeout=30,
                what=f"worker {name} to be ready",
            )
            assert proc.poll() is None, f"worker {name} exited:\n{worker.log()}"
        return worker

    yield start
    for worker in started:
        worker.stop()
    for worker in started:
        # shown by pytest only when the test failed
        print(f"===== worker {worker.name} log ({worker.log_path}) =====")
        print(worker.log()[-20000:])


@pytest.fixture
def start_beat(env: Env, tmp_path: Path) -> Iterator[Callable[[Mapping[str, str]], Path]]:
    """Start a real ``celery beat`` on the test's services, its environment overridden by
    ``environ`` (short schedules); killed at teardown. Returns its log's path."""
    procs: list[subprocess.Popen[bytes]] = []
    log_path = tmp_path / "beat.log"

    def start(environ: Mapping[str, str]) -> Path:
        cmd = [sys.executable, "-m", "celery", "-A", "tracked_app", "beat", "-l", "info"]
        cmd += ["-s", str(tmp_path / "beat-schedule"), "--pidfile="]
        with log_path.open("wb") as log:
            procs.append(
                subprocess.Popen(
                    cmd,
                    cwd=str(HERE),
                    env=worker_environ(env.config, None, environ),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        return log_path

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    if log_path.exists():
        print("===== beat log =====\n" + log_path.read_text(errors="replace")[-5000:])


@pytest.fixture
def run_cli(env: Env) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real ``celery`` executable, ``celery -A tracked_app tracked <args>``, as a
    subprocess on the test's services."""

    def run(
        *args: str, environ: Mapping[str, str | None] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CELERY, "-A", "tracked_app", "tracked", *args],
            cwd=str(HERE),
            env=worker_environ(env.config, None, environ),
            capture_output=True,
            text=True,
            timeout=60,
        )

    return run


@pytest.fixture
def cli_in_process(env: Env) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``celery -A tracked_app tracked <args>`` run in this process with click's runner on
    the test's app: the same commands, output and exit codes, without a 2 s interpreter
    start. For tests that read the output; ``run_cli`` (the real executable) for the entry
    point, an environment of its own and the terminal."""
    from celery.bin.base import CLIContext
    from click.testing import CliRunner

    from celery_tracked.cli import tracked

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        context = CLIContext(app=env.app, no_color=False, workdir=None)
        result = CliRunner().invoke(tracked, list(args), obj=context, catch_exceptions=False)
        command = [CELERY, "-A", "tracked_app", "tracked", *args]
        return subprocess.CompletedProcess(command, result.exit_code, result.stdout, result.stderr)

    return run


def terminate_worker_connections(database_url: str) -> list[Any]:
    """``pg_terminate_backend`` of the workers' connections only (their application name),
    never this process's; the ``(pid, terminated)`` rows."""
    killer = create_engine(database_url, poolclass=NullPool)
    try:
        with killer.connect() as conn:
            return list(
                conn.execute(
                    text(
                        "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND application_name = :app"
                    ),
                    {"app": WORKER_APPNAME},
                ).all()
            )
    finally:
        killer.dispose()


def run_producers(procs: list[Any], results: Any) -> list[tuple[str, bool, str]]:
    """Start the producer processes, gather the ``(job_id, created, error)`` list each puts
    on ``results``, and make sure none outlives the call."""
    for p in procs:
        p.start()
    outcomes: list[tuple[str, bool, str]] = []
    try:
        for _ in procs:
            outcomes.extend(results.get(timeout=60))
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
        results.close()
        results.join_thread()
    return outcomes


@contextlib.contextmanager
def result_backend_worker(
    env: Env, start_worker: Callable[..., Worker], redis_url: str, **worker: Any
) -> Iterator[Env]:
    """The test's app and one worker (``start_worker``'s options), both with a Redis result
    backend (``.get()`` waits for a task's final state); afterwards the app's result
    consumer is stopped and its connections closed."""
    env.app.conf.update(result_backend=redis_url, task_ignore_result=False)
    start_worker(environ={"TRACKED_TEST_RESULT_BACKEND": redis_url}, **worker)
    try:
        yield env
    finally:
        gc.collect()
        backend = env.app.backend
        with contextlib.suppress(Exception):
            backend.result_consumer.stop()
            # a result freed later would unsubscribe, reopening the closed connection
            backend.result_consumer.subscribed_to.clear()
        backend.client.connection_pool.disconnect()
