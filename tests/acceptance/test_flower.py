"""Flower beside a real worker (issue 13, item 7): tracked tasks show redacted arguments
before and after a retry, their states agree with the jobs, and the maintenance tasks do
not flood the task list. The task page is rendered by headless Chromium; its screenshot
is kept in ``test-artifacts/`` (``TRACKED_TEST_ARTIFACTS`` to move it)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, ROOT, Env, worker_environ
from safety_tasks import CUSTOM_KEY

from celery_tracked.adapter.beat import RELAY_TASK
from tests.conftest import IN_CI, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

ARTIFACTS = Path(os.environ.get("TRACKED_TEST_ARTIFACTS", ROOT / "test-artifacts"))
CELERY = (sys.executable, "-m", "celery", "-A", "tracked_app")
#: Flower's state for each final job status.
STATES = {"completed": "SUCCESS", "failed": "FAILURE"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return str(response.read().decode())


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if IN_CI:
            pytest.fail("chromium is not installed (CI=true: .ci/run installs it)")
        pytest.skip("missing service: chromium is not reachable")
    return found


@pytest.fixture
def flower(env: Env, tmp_path: Path) -> Iterator[int]:
    port = _free_port()
    log_path = tmp_path / "flower.log"
    log = log_path.open("wb")
    environ = worker_environ(env.config, None, {"FLOWER_UNAUTHENTICATED_API": "true"})
    proc = subprocess.Popen(
        [*CELERY, "flower", f"--port={port}", "--address=127.0.0.1"],
        cwd=str(HERE),
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def up() -> bool:
        if proc.poll() is not None:
            return True
        try:
            _get(port, "/healthcheck")
        except OSError:
            return False
        return True

    try:
        wait_for(up, timeout=30, what="flower")
        assert proc.poll() is None, log_path.read_text()
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        print(log_path.read_text()[-5000:])


def _tasks(port: int) -> dict[str, Any]:
    return dict(json.loads(_get(port, "/api/tasks")))


def test_flower_shows_redacted_tracked_tasks_whose_states_agree_with_their_jobs(
    env: Env, start_worker: Any, flower: int, tmp_path: Path
) -> None:
    chromium = _chromium()
    start_worker(events=True)
    canary = f"canary{uuid.uuid4().hex}"
    call = {"user": "alice", "password": canary, "dsn": f"postgresql://app:{canary}@db/x"}
    call[CUSTOM_KEY] = canary
    task = env.task("acc.leaky")
    retried = task.enqueue(**call, fail_times=1).job_id  # fails once, retried, completes
    failed = task.enqueue(**call, fail_times=99).job_id  # uses up its attempts
    jobs = {
        retried: env.wait_status(retried, "completed", "failed", timeout=30),
        failed: env.wait_status(failed, "completed", "failed", timeout=30),
    }
    assert jobs[retried].status.value == "completed" and jobs[retried].attempts_made == 2
    assert jobs[failed].status.value == "failed"
    # the relay ran in the worker too: it must not show in Flower's task list
    # (sent like Beat sends it by default: no task-sent event)
    env.app.conf.task_send_sent_event = False
    relayed = env.app.send_task(RELAY_TASK, queue="acc")
    env.app.conf.task_send_sent_event = True

    def settled() -> dict[str, Any] | None:
        tasks = _tasks(flower)
        states = {job_id: tasks.get(job_id, {}).get("state") for job_id in jobs}
        want = {job_id: STATES[job.status.value] for job_id, job in jobs.items()}
        return tasks if states == want else None

    tasks = wait_for(settled, timeout=30, what="Flower to show the jobs' final states")
    for job_id in jobs:
        info = json.loads(_get(flower, f"/api/task/info/{job_id}"))
        assert info["state"] == STATES[jobs[job_id].status.value]
        assert "[redacted]" in info["kwargs"], info["kwargs"]
        assert canary not in json.dumps(info), "Flower's task info shows the secret"
    assert tasks[retried]["retries"] == 1, "one retry made"
    assert canary not in json.dumps(tasks)
    assert relayed.id not in tasks and not [
        t for t in tasks.values() if t.get("name") == RELAY_TASK
    ]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "flower-task-page.png"
    url = f"http://127.0.0.1:{flower}/task/{retried}"
    common = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu"]
    profile = f"--user-data-dir={tmp_path / 'chromium'}"
    dom = subprocess.run(
        [*common, profile, "--dump-dom", url], capture_output=True, text=True, timeout=60
    ).stdout
    assert retried in dom and "SUCCESS" in dom, dom[-2000:]
    assert "[redacted]" in dom and canary not in dom
    subprocess.run(
        [*common, profile, "--window-size=1280,1400", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert shot.stat().st_size > 10_000, "a rendered page"
