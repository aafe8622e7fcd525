"""Acceptance: operating a tracked app (docs/usage.md, docs/configuration.md).

The ``celery tracked show``/``stats`` CLI run for real, the repr of a finished job, the
guard's Redis named by ``CELERY_TRACKED_REDIS_URL`` alone, and a ``rediss://`` (TLS)
Redis used end to end.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from tracked_app import QUEUE, create_app
from waiting import PROMPT_S, Waiter

from celery_tracked import JobStatus, Settings, Tracker
from tests.conftest import wait_for


def test_cli_show_and_stats_never_print_payload_or_result(
    env: Any, start_worker: Any, run_cli: Any
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    task = env.task("acc.secret")
    done = task.enqueue(user="alice-in-payload", password=canary, fail_times=0).job_id
    failed = task.enqueue(user="bob", password=canary, fail_times=9, _max_attempts=1).job_id
    waiting = env.task("acc.succeed").enqueue(x="later", _options={"countdown": 120}).job_id
    start_worker()
    env.wait_status(done, "completed", timeout=30)
    env.wait_status(failed, "failed", timeout=30)
    assert env.tracker.get_job(done).result == {"user": "alice-in-payload", "run": 1}

    shown = run_cli("show", done, "--json")
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert out["id"] == done
    assert out["status"] == "completed"
    assert out["job_type"] == "acc.secret"
    assert out["queue"] == QUEUE
    assert out["attempts"] == "1/3"
    assert [e["event"] for e in out["history"]] == ["enqueued", "started", "completed"]
    assert canary not in shown.stdout + shown.stderr
    assert "alice-in-payload" not in shown.stdout  # neither the payload nor the result
    table = run_cli("show", done)  # the readable form says the same, and no more
    assert table.returncode == 0, table.stderr
    assert done in table.stdout and "completed" in table.stdout
    assert canary not in table.stdout and "alice-in-payload" not in table.stdout

    shown = run_cli("show", failed, "--no-history", "--json")
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert out["status"] == "failed"
    assert out["attempts"] == "1/1"
    assert out["error"].startswith("RuntimeError: login failed for bob with password ")
    assert canary not in shown.stdout + shown.stderr
    assert out["history"] is None

    missing = run_cli("show", str(uuid.uuid4()))
    assert missing.returncode == 1
    assert "no job" in missing.stderr

    stats = run_cli("stats", "--json")
    assert stats.returncode == 0, stats.stderr
    per_queue = json.loads(stats.stdout)
    assert set(per_queue) == {QUEUE}
    assert per_queue[QUEUE]["total"] == 3
    counts = {k: v for k, v in per_queue[QUEUE]["counts"].items() if v}
    assert counts == {"completed": 1, "failed": 1, "pending": 1}
    # the pending job is not due yet (a countdown): scheduled, not waiting to run
    assert per_queue[QUEUE]["scheduled"] == 1
    assert per_queue[QUEUE]["oldest_pending_age_s"] is None
    assert env.status(waiting) == "pending"


def test_repr_of_a_completed_job_hides_its_result_and_payload(env: Any, start_worker: Any) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    start_worker()
    job_id = env.task("acc.succeed").enqueue(x=marker).job_id
    job = env.wait_status(job_id, "completed", "failed", timeout=30)

    assert job.status is JobStatus.COMPLETED
    assert job.result == {"x": marker, "run": 1}  # the row holds both...
    assert marker in (job.result_json or "") and marker in (job.payload_json or "")
    shown = repr(job)
    assert job_id in shown and "completed" in shown
    assert marker not in shown  # ...the repr neither
    assert marker not in str(job)


def test_worker_configured_by_celery_tracked_redis_url_alone(
    env: Any, start_worker: Any, slow_reread: float
) -> None:
    """No ``tracked_redis_url`` in the app's conf, no ``REDIS_URL``: the worker takes the
    Redis of ``CELERY_TRACKED_REDIS_URL``, and its notification reaches a waiter there."""
    # without the variable, the worker refuses to start and names the setting
    unset = start_worker(
        "w-unset", ready=False, environ={"REDIS_URL": None, "CELERY_TRACKED_REDIS_URL": None}
    )
    wait_for(lambda: unset.proc.poll() is not None, timeout=30, what="the worker to exit")
    assert unset.proc.returncode != 0
    assert "tracked_redis_url" in unset.log()

    job_id = env.task("acc.succeed").enqueue(x="env").job_id
    waiter = Waiter.on(env, job_id)
    worker = start_worker(
        environ={"REDIS_URL": None, "CELERY_TRACKED_REDIS_URL": env.config["redis_url"]}
    )
    waiter.join(timeout=30)
    assert waiter.error is None, waiter.error
    assert waiter.result == {"x": "env", "run": 1}
    assert waiter.latency() < PROMPT_S  # notified through the env var's Redis
    assert "invalid configuration" not in worker.log()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tls_redis(tmp_path: Path, redis_available: None) -> Iterator[str]:
    """A private redis-server that speaks TLS only (self-signed certificate)."""
    if shutil.which("openssl") is None or shutil.which("redis-server") is None:
        pytest.skip("openssl and redis-server are needed for a TLS Redis")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    log = tmp_path / "tls-redis.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *("redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"),
                *("--tls-cert-file", str(cert), "--tls-key-file", str(key)),
                *("--tls-auth-clients", "no", "--save", "", "--appendonly", "no"),
                *("--dir", str(tmp_path)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: "Ready to accept" in log.read_text() or proc.poll() is not None,
            timeout=20,
            what="the TLS redis-server",
        )
        if proc.poll() is not None:
            pytest.skip(f"redis-server without TLS support: {log.read_text()[-500:]}")
        yield f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_rediss_url_guards_and_notifies_over_tls(
    env: Any, start_worker: Any, tls_redis: str, slow_reread: float
) -> None:
    settings = Settings.from_conf(
        {"tracked_redis_url": tls_redis, "tracked_database_url": env.database_url}, environ={}
    )
    assert settings.redis_url == tls_redis

    app = create_app({**env.config, "redis_url": tls_redis})
    tracker = Tracker.for_app(app)
    tls = redis.Redis.from_url(tls_redis)
    try:
        keyed = app.tasks["acc.keyed"]
        first = keyed.enqueue(x="tls")
        second = keyed.enqueue(x="tls")
        assert first.created is True and second.created is False
        assert second.job_id == first.job_id
        # the guard key is in the TLS Redis, none in the plain one
        assert [k for k in tls.keys("*") if b"guard" in k], tls.keys("*")
        assert not [k for k in env.redis.keys("*") if b"guard" in k]

        waiter = Waiter(tracker, tls, first.job_id).start()
        start_worker(environ={"REDIS_URL": tls_redis})
        waiter.join(timeout=30)
        assert waiter.error is None, waiter.error
        assert waiter.result == {"x": "tls", "run": 1}
        assert waiter.latency() < PROMPT_S  # the worker published over TLS
        assert env.sql("SELECT count(*) FROM background_jobs")[0][0] == 1
    finally:
        tls.close()
        tracker.close()
        app.close()
