"""Acceptance (issue 16): a user's test file written only against docs/testing.md passes
with the plugin, on both stores it offers, twice in a row with the same keys.

``tests/plugin_proj`` is a small shop (``shop/tasks.py``: tracked tasks declared without
``app=``) whose own ``tests/`` use the plugin's fixtures (``tracked``,
``tracked_worker``, Celery's ``celery`` mark) and nothing else of this repository: jobs
enqueued and asserted, run, a retried job, a failing one, an unrecoverable one, a
pipeline whose step declares successors with ``self.then``, inline mode. Its conftest
parametrizes ``tracked_database`` over ``memory`` and ``sqlite``. It runs in a
``python -m pytest`` of its own, installed as a user has it (the ``pytest11`` entry
point), twice: the second run meets no key of the first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PROJ_ROOT = Path(__file__).resolve().parent.parent / "plugin_proj"
#: The project's tests, each run on both stores.
PROJECT_TESTS = 2 * sum(
    f.read_text().count("\ndef test_") for f in (PROJ_ROOT / "tests").glob("test_*.py")
)


def run_project_suite(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``python -m pytest`` in the project's folder (its ``pytest.ini``, its ``tests/``),
    with no service variable: the plugin needs none."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_TRACKED_", "PYTEST_")) and k != "REDIS_URL"
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", tmp_path],
        cwd=str(PROJ_ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_users_test_file_passes_twice_in_a_row_with_the_same_keys(tmp_path: Path) -> None:
    assert PROJECT_TESTS >= 16
    for run_number in (1, 2):
        run = run_project_suite(tmp_path / f"run{run_number}")
        output = run.stdout + run.stderr
        assert run.returncode == 0, f"run {run_number}:\n{output}"
        summary = output.strip().splitlines()[-1]  # "16 passed in 3.1s": nothing else
        assert re.fullmatch(rf"{PROJECT_TESTS} passed in [0-9.]+s", summary), output
