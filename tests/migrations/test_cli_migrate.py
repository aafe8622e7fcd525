"""``celery -A proj tracked migrate``/``downgrade`` need only the database setting."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sqlalchemy import create_engine, inspect


def _celery(app_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    celery = Path(sys.executable).parent / "celery"
    return subprocess.run(
        [str(celery), "-A", "proj", "tracked", *args],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_migrate_and_downgrade_with_only_the_database_url(tmp_path: Path) -> None:
    (tmp_path / "proj.py").write_text(
        textwrap.dedent(
            """
            from celery import Celery
            app = Celery("proj", broker="memory://")
            """
        )
    )
    url = f"sqlite:///{tmp_path / 'only.sqlite3'}"
    env = {k: v for k, v in os.environ.items() if not k.endswith("REDIS_URL")}
    env.update(CELERY_TRACKED_DATABASE_URL=url, PYTHONPATH=str(tmp_path))
    out = _celery(tmp_path, env, "migrate")
    assert out.returncode == 0, out.stderr
    assert "head" in out.stdout
    assert {"background_jobs", "background_job_events"} <= _tables(url)
    out = _celery(tmp_path, env, "downgrade", "base", "--yes")
    assert out.returncode == 0, out.stderr
    assert not {"background_jobs", "background_job_events"} & _tables(url)
