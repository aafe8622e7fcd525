"""``Tracker.retry`` from a process that never imported the task's module (issue 12, item 7).

An admin script with a bare Celery app (no tracked task registered) retries a failed job
whose stored arguments hold a redacted secret, passing it again. The message it queues is
read from the broker (kombu's Redis list): its ``argsrepr``/``kwargsrepr`` (what task
events and Flower show) must be redacted, the secret nowhere but in the body the worker
needs; and the re-run must get the task's own ``max_attempts``, not
``tracked_default_attempts``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from conftest import Env

from celery_tracked import JobStatus
from tests.conftest import wait_for

ADMIN = """
import json, sys
from celery import Celery
from celery_tracked import Tracker

broker, database_url, redis_url, job_id, secret = sys.argv[1:]
app = Celery("admin", broker=broker, set_as_current=False)
app.conf.tracked_database_url = database_url
app.conf.tracked_redis_url = redis_url
tracker = Tracker.for_app(app)
retried = tracker.retry(job_id, arguments={"api_token": secret})
tracker.close()
imported = sorted(m for m in sys.modules if m in ("tracked_app", "key_tasks"))
print(json.dumps({"retried": retried, "tasks": sorted(app.tasks), "imported": imported}))
"""


def run_admin(env: Env, tmp_path: Path, job_id: str, secret: str) -> dict[str, Any]:
    """The admin script, in a process of its own that cannot import the test's tasks."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_TRACKED_", "TRACKED_TEST_")) and k != "PYTHONPATH"
    }
    script = tmp_path / "admin.py"
    script.write_text(ADMIN)
    config = env.config
    argv = [config["broker"], config["database_url"], config["redis_url"], job_id, secret]
    done = subprocess.run(
        [sys.executable, str(script), *argv],
        cwd=str(tmp_path),
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert secret not in done.stderr, "the admin process logged the secret"
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_an_admin_retry_publishes_redacted_reprs_and_the_tasks_own_attempts(
    env: Env, start_worker: Any, tmp_path: Path
) -> None:
    worker = start_worker()
    secret = f"tok-{uuid.uuid4().hex}"
    queued = env.task("acc.fails_first").enqueue(x="admin", api_token=secret)
    failed = env.wait_status(queued.job_id, "failed")
    assert (failed.attempts_made, failed.max_attempts) == (1, 1)  # the task's max_attempts=1
    wait_for(env.broker_empty, timeout=10, what="the failed run's message to be acknowledged")
    worker.stop(graceful=True)  # the retried message stays in the broker, to be read

    out = run_admin(env, tmp_path, queued.job_id, secret)
    assert out["retried"] is True
    assert not [t for t in out["tasks"] if t.startswith("acc.")], out["tasks"]
    assert out["imported"] == []

    [message] = env.broker_messages()
    headers = message["headers"]
    assert headers["id"] == queued.job_id
    assert secret not in json.dumps(headers), headers  # argsrepr, kwargsrepr and the rest
    assert "'api_token': '[redacted]'" in headers["kwargsrepr"], headers["kwargsrepr"]
    assert "'x': 'admin'" in headers["kwargsrepr"]
    body = base64.b64decode(message["body"]).decode()
    assert secret in body, "the worker gets the real value"
    job = env.tracker.get_job(queued.job_id)
    assert job is not None and job.status is JobStatus.PENDING
    assert job.max_attempts == 2, "one more round of the task's own max_attempts (1), not 3"

    start_worker(name="w2")
    result = env.tracker.wait(queued.job_id, timeout=30)
    assert result == {"x": "admin", "run": 2, "token_seen": True}
    job = env.tracker.get_job(queued.job_id)
    assert job is not None and (job.attempts_made, job.max_attempts) == (2, 2)
    stored = env.sql("SELECT payload_json FROM background_jobs WHERE id = :i", i=queued.job_id)
    assert secret not in stored[0][0]
