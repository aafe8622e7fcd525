"""`make demo`'s script runs end to end on the embedded default (SQLite, in-process worker)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_demo_runs_one_job_end_to_end() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "example_project" / "demo.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "demo OK" in out.stdout
    assert "completed" in out.stdout and "retrying" in out.stdout
    assert "s3cr3t-token" not in out.stdout + out.stderr
