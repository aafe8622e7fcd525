"""`make demo` (``python -m example_project.demo``) ends with every job as the story
expects: embedded (no service variables: SQLite, in-process worker and guard), and against
real PostgreSQL, Redis and ``celery worker`` processes with the service variables set."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

SERVICE_VARIABLES = ("DEMO_BROKER_URL", "CELERY_TRACKED_DATABASE_URL", "CELERY_TRACKED_REDIS_URL")
#: The story's jobs: the indexing step follows OCR, the course has seven steps.
EXPECTED = {
    "ocr": ("completed", 1),
    "indexing": ("completed", 1),
    "fetch": ("completed", 2),
    "report": ("failed", 3),
    "import": ("failed", 1),
    "courses.outline": ("completed", 1),
    "courses.module_lessons": ("completed", 1),
    "courses.module_exam": ("completed", 1),
    "courses.final_exam": ("completed", 1),
    "courses.mastery_analysis": ("completed", 1),
}


def run_demo(data_dir: Path, **services: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
    env.update(services, DEMO_DATA_DIR=str(data_dir))
    out = subprocess.run(
        [sys.executable, "-m", "example_project.demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("DEMO-RESULT ")]
    assert out.returncode == 0 and len(lines) == 1, out.stdout + out.stderr
    return out, json.loads(lines[0].removeprefix("DEMO-RESULT "))


def assert_story(result: Any) -> None:
    assert result["ok"] and result["finished"] and result["deduplicated"]
    jobs = result["jobs"]
    assert sorted(j["job_type"] for j in jobs) == sorted(
        [*EXPECTED, "courses.module_lessons", "courses.module_exam"]
    )
    for job in jobs:
        assert (job["status"], job["attempts"]) == EXPECTED[job["job_type"]], job


def test_make_demo_runs_the_command_tested_here() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo: \S+\n\t\$\(PY\) -m example_project\.demo$", makefile, re.M)


def test_demo_embedded_every_job_ends_as_expected(tmp_path: Path) -> None:
    out, result = run_demo(tmp_path)
    assert result["mode"] == "embedded"
    assert_story(result)
    assert "live progress" in out.stdout and "reading page 2/4" in out.stdout
    assert "== histories" in out.stdout and "Unrecoverable: file" in out.stdout
    # the SQLite file the demo leaves says the same as its closing line
    with sqlite3.connect(tmp_path / "demo.sqlite3") as db:
        rows = db.execute("SELECT id, status, attempts_made FROM background_jobs").fetchall()
    assert {r[0]: (r[1], r[2]) for r in rows} == {
        j["id"]: (j["status"], j["attempts"]) for j in result["jobs"]
    }


def test_demo_with_services_runs_real_workers(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    out, result = run_demo(
        tmp_path,
        DEMO_BROKER_URL=redis_url,
        CELERY_TRACKED_DATABASE_URL=postgres_url,
        CELERY_TRACKED_REDIS_URL=redis_url,
    )
    assert result["mode"] == "services"
    assert_story(result)
    assert "2 celery worker processes ready" in out.stdout
    assert sorted(p.name for p in tmp_path.glob("worker-*.log")) == [
        "worker-courses.log",
        "worker-docs.log",
    ]


def test_demo_refuses_some_service_variables_without_the_others(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
    env.update(DEMO_BROKER_URL="redis://127.0.0.1:6379/0", DEMO_DATA_DIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "example_project.demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "CELERY_TRACKED_DATABASE_URL, CELERY_TRACKED_REDIS_URL missing" in out.stderr
    assert not list(tmp_path.iterdir())  # nothing created
