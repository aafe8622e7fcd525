"""Issue 22, item 7: docs/testing.md's "your own app" advice (override ``celery_app``)
combined with the same page's ``@pytest.mark.celery(task_always_eager=True)`` example:
the mark's settings reach the tracked app (they did not, and ``.get()`` waited for good),
and are put back after the test. A user's project (``tests/plugin_own_app``) run by a
``python -m pytest`` of its own, bounded by a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROJ_ROOT = Path(__file__).resolve().parent.parent / "plugin_own_app"
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def test_the_celery_mark_reaches_your_own_app(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_TRACKED_", "PYTEST_")) and k != "REDIS_URL"
    }
    try:
        run = subprocess.run(
            [*PYTEST, "--basetemp", str(tmp_path)],
            cwd=str(PROJ_ROOT),
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the project's tests hung:\n{exc.stdout!r}\n{exc.stderr!r}") from None
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert output.strip().splitlines()[-1].startswith("2 passed"), output
