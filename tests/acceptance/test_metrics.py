"""Prometheus metrics (issue 13, item 6): a prefork worker counts into a multiprocess
directory; ``celery -A proj tracked metrics --port N`` serves those counters and the
table's exact counts."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, Env, worker_environ
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool
from tracked_app import QUEUE

from tests.conftest import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@pytest.fixture
def multiproc_dir(tmp_path: Path) -> Path:
    path = tmp_path / "prometheus"
    path.mkdir()
    return path


@pytest.fixture
def metrics_server(env: Env, multiproc_dir: Path, tmp_path: Path) -> Iterator[int]:
    port = _free_port()
    options = ["--port", str(port), "--addr", "127.0.0.1", "--cache", "0"]
    log = (tmp_path / "metrics.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tracked_app", "tracked", "metrics", *options],
        cwd=str(HERE),
        env=worker_environ(env.config, None, {"PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir)}),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: _answers(port) or proc.poll() is not None, timeout=30, what="metrics")
        assert proc.poll() is None, (tmp_path / "metrics.log").read_text()
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _answers(port: int) -> bool:
    try:
        _scrape(port)
    except OSError:
        return False
    return True


def _seed(env: Env, status: str, n: int, queue: str) -> None:
    """``n`` rows inserted directly (a table the workers never saw)."""
    engine = create_engine(env.database_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            for _ in range(n):
                conn.execute(
                    text(
                        "INSERT INTO background_jobs (id, queue_name, job_type, task_name, "
                        "status, payload_json, attempts_made, max_attempts, key_round, revision, "
                        "progress, created_at, updated_at) VALUES (:id, :queue, 'seeded', "
                        "'seed.task', :status, '{}', 0, 3, 0, 0, 0, now(), now())"
                    ),
                    {"id": str(uuid.uuid4()), "queue": queue, "status": status},
                )
    finally:
        engine.dispose()


def _value(scraped: dict[Any, float], name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_endpoint_reports_a_prefork_workers_counters_and_the_tables_counts(
    env: Env, start_worker: Any, multiproc_dir: Path, metrics_server: int
) -> None:
    start_worker(
        concurrency=2,
        environ={"PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir), "CELERY_TRACKED_METRICS": "true"},
    )
    ok = [env.task("acc.succeed").enqueue(x=i).job_id for i in range(6)]
    bad = env.task("acc.always_fail").enqueue(x="m").job_id
    for job_id in ok:
        env.wait_status(job_id, "completed")
    env.wait_status(bad, "failed")
    _seed(env, "cancelled", 4, "other")
    _seed(env, "failed", 2, "other")

    def counted() -> dict[Any, float] | None:
        scraped = _scrape(metrics_server)
        done = _value(
            scraped,
            "celery_tracked_transitions_total",
            event="completed",
            queue=QUEUE,
            job_type="acc.succeed",
        )
        return scraped if done == 6 else None

    scraped = wait_for(counted, timeout=20, what="the workers' counters")
    # the table's exact counts, per queue and status
    rows = env.sql("SELECT queue_name, status, count(*) FROM background_jobs GROUP BY 1, 2")
    assert rows, "seeded"
    for queue, status, n in rows:
        assert _value(scraped, "celery_tracked_jobs", queue=queue, status=status) == n
    assert _value(scraped, "celery_tracked_jobs", queue="other", status="cancelled") == 4
    assert _value(scraped, "celery_tracked_jobs", queue=QUEUE, status="pending") == 0
    # counted in the pool children: 3 attempts of the failing job, 2 of them retried
    fail = {"queue": QUEUE, "job_type": "acc.always_fail"}
    assert _value(scraped, "celery_tracked_transitions_total", event="failed", **fail) == 1
    assert _value(scraped, "celery_tracked_transitions_total", event="retrying", **fail) == 2
    duration = _value(
        scraped,
        "celery_tracked_run_duration_seconds_count",
        outcome="completed",
        queue=QUEUE,
        job_type="acc.succeed",
    )
    assert duration == 6
    assert _value(scraped, "celery_tracked_relay_backlog") == 0
    assert _value(scraped, "celery_tracked_expired_leases") == 0


def test_deduplicated_enqueues_are_counted_in_the_producer(env: Env) -> None:
    """A producer with ``tracked_metrics`` counts its deduplicated enqueues (in-process:
    the default registry, no multiprocess directory)."""
    pytest.importorskip("prometheus_client")
    from prometheus_client import REGISTRY

    from celery_tracked.services.metrics import MetricsHooks

    env.tracker.add_hook(MetricsHooks())
    key = f"k-{uuid.uuid4()}"
    labels = {"queue": QUEUE, "job_type": "acc.keyed"}
    before = REGISTRY.get_sample_value("celery_tracked_deduplicated_enqueues_total", labels) or 0
    task = env.task("acc.keyed")
    first = task.enqueue(x=key)
    again = task.enqueue(x=key)
    assert first.created and not again.created
    after = REGISTRY.get_sample_value("celery_tracked_deduplicated_enqueues_total", labels)
    assert after == before + 1


def test_the_endpoint_answers_with_the_counters_while_the_database_is_down(
    env: Env, multiproc_dir: Path, tmp_path: Path
) -> None:
    """The database unreachable: every scrape still answers 200 with the workers' counters
    and ``celery_tracked_table_up 0`` (was: HTTP 500 and a traceback per scrape)."""
    environ = {"PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir)}
    count_one = (
        "from celery_tracked.services.metrics import MetricsHooks; "
        "from celery_tracked.core.hooks import "
        "Transition; MetricsHooks().after_transition(Transition('j', 'completed', "
        "'completed', 'm', 'down-q', 'down-t', 1, 5))"
    )
    subprocess.run(
        [sys.executable, "-c", count_one],
        env=worker_environ(env.config, None, environ),
        check=True,
        timeout=60,
    )
    dead = f"postgresql+psycopg://postgres:hunter2@127.0.0.1:{_free_port()}/gone"
    port = _free_port()
    log_path = tmp_path / "metrics-down.log"
    options = ["--port", str(port), "--addr", "127.0.0.1", "--cache", "0"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tracked_app", "tracked", "metrics", *options],
            cwd=str(HERE),
            env=worker_environ({**env.config, "database_url": dead}, None, environ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: _answers(port) or proc.poll() is not None, timeout=30, what="up")
            for _ in range(2):
                scraped = _scrape(port)
                assert _value(scraped, "celery_tracked_table_up") == 0
                done = {"event": "completed", "queue": "down-q", "job_type": "down-t"}
                assert _value(scraped, "celery_tracked_transitions_total", **done) == 1
                assert not any(name == "celery_tracked_jobs" for name, _ in scraped)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    text_logged = log_path.read_text()
    assert "Traceback" not in text_logged and "hunter2" not in text_logged
    assert "could not read the jobs table" in text_logged
