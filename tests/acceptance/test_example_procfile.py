"""The example service's Procfile under honcho, as its README starts it: the API (uvicorn),
two workers, beat and flower; one job submitted over real HTTP runs to ``completed``."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from service_helpers import ROOT, free_port, service_environ

from example_project.service.config import ServiceConfig
from example_project.service.storage import create_tables
from tests.conftest import wait_for

BIN = str(Path(sys.executable).parent)


def test_the_procfile_starts_a_working_fleet(
    redis_url: str, pg_database_url: str, tmp_path: Path
) -> None:
    create_tables(pg_database_url)
    config = ServiceConfig(redis_url, pg_database_url, redis_url)
    flower_port = free_port()
    environ = service_environ(config)
    environ.update(
        SERVICE_API_TOKENS="tok-alice=alice",
        FLOWER_PORT=str(flower_port),
        TMPDIR=str(tmp_path),
        HEAVY_CONCURRENCY="1",  # the machine running the tests is small
        LIGHT_CONCURRENCY="1",
        PATH=os.pathsep.join((BIN, environ.get("PATH", ""))),
    )
    log_path = tmp_path / "honcho.log"
    procfile = str(ROOT / "example_project" / "Procfile")
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [f"{BIN}/honcho", "-f", procfile, "-d", str(ROOT), "start", "-p", str(free_port())],
            cwd=str(ROOT),
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def started() -> str | None:
            text = log_path.read_text(errors="replace")
            assert proc.poll() is None, text
            ready = "Uvicorn running on" in text and text.count(" ready.") >= 2
            return text if ready and "flower" in text.lower() else None

        text = wait_for(started, timeout=60, what="the fleet to start")
        port = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", text)
        assert port is not None, text
        auth = {"Authorization": "Bearer tok-alice"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port.group(1)}", headers=auth) as http:
            answer = http.post("/jobs/notification", json={"message": "hi"})
            assert answer.status_code == 202, answer.text
            job_id = answer.json()["job_id"]
            job = wait_for(
                lambda: (j := http.get(f"/jobs/{job_id}").json())["status"] == "completed" and j,
                timeout=30,
                what="the job to complete",
            )
            assert job["attempts"] == 1
        flower = wait_for(
            lambda: _status(f"http://127.0.0.1:{flower_port}/") == 200,
            timeout=30,
            what="flower to answer",
        )
        assert flower
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        print(log_path.read_text(errors="replace")[-10000:])


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None
