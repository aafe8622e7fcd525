"""The README's "Your first tracked job", pasted by a new user: the wheel built from this
checkout (``python -m build --wheel``) installed with its ``postgres`` extra in a fresh
virtualenv (its dependencies from the package index, as a user gets them), ``proj.py`` and
``first_job.py`` taken from the README's python blocks, and the README's shell steps run
one by one (``tracked migrate``, a real ``celery worker``, ``python first_job.py``).

The only change: the README's fixed URLs point at this test's fresh PostgreSQL database and
Redis db.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.conftest import ROOT

SECTION = "## Your first tracked job"
README_URLS = {
    "redis://127.0.0.1:6379/0": "redis",
    "redis://127.0.0.1:6379/1": "redis",
    "postgresql+psycopg://postgres@127.0.0.1/test": "postgres",
}


def blocks(markdown: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", markdown, re.S | re.M)


def readme_files() -> dict[str, str]:
    """The README's python blocks that start with ``# <name>.py``: name -> code."""
    found = {}
    for code in blocks((ROOT / "README.md").read_text(), "python"):
        first = code.splitlines()[0]
        if re.fullmatch(r"# \w+\.py", first):
            found[first[2:]] = code
    return found


def readme_steps() -> list[str]:
    """The commands of the first shell block of the section, comments dropped."""
    section = (ROOT / "README.md").read_text().split(SECTION, 1)[1]
    lines = blocks(section, "sh")[0].splitlines()
    return [line.split("  #")[0].strip() for line in lines if line.strip()]


def test_readme_holds_the_steps_this_test_runs() -> None:
    assert set(readme_files()) == {"proj.py", "first_job.py"}
    steps = readme_steps()
    assert steps == [
        "python3 -m venv venv && . venv/bin/activate",
        'pip install "/path/to/celery-tracked[postgres]"',
        "celery -A proj tracked migrate",
        "celery -A proj worker -Q ocr_queue &",
        "python first_job.py",
    ]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (built,) = out.glob("celery_tracked-*.whl")
    return built


def venv_env(venv: Path) -> dict[str, str]:
    """What ``. venv/bin/activate`` gives; nothing of this checkout on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def fresh_venv(folder: Path, wheel: Path) -> dict[str, str]:
    """Step 1 and 2: a new virtualenv, the built wheel with the extra the README names."""
    venv = folder / "venv"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True, timeout=120)
    env = venv_env(venv)
    install = ["pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[postgres]"]
    subprocess.run(install, env=env, cwd=folder, check=True, capture_output=True, timeout=300)
    return env


def write_files(folder: Path, redis_url: str, postgres_url: str) -> None:
    urls = {"redis": redis_url, "postgres": postgres_url}
    for name, code in readme_files().items():
        for fixed, kind in README_URLS.items():
            code = code.replace(fixed, urls[kind])
        (folder / name).write_text(code)
    assert "127.0.0.1:6379/0" not in (folder / "proj.py").read_text()


@contextlib.contextmanager
def background(command: list[str], env: dict[str, str], folder: Path) -> Iterator[Path]:
    log = folder / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command,
            env=env,
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def sh(step: str, env: dict[str, str], folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        shlex.split(step), env=env, cwd=folder, capture_output=True, text=True, timeout=90
    )


def run_steps(folder: Path, env: dict[str, str]) -> str:
    """Steps 3 to 5, as the README writes them; the output of the last one."""
    migrate, worker, first_job = readme_steps()[2:]
    done = sh(migrate, env, folder)
    assert done.returncode == 0, done.stdout + done.stderr
    with background(shlex.split(worker.removesuffix("&")), env, folder) as log:
        done = sh(first_job, env, folder)
        assert done.returncode == 0, done.stdout + done.stderr + log.read_text()
    return done.stdout


def test_readme_first_tracked_job_with_the_wheel_in_a_fresh_venv(
    tmp_path: Path, wheel: Path, postgres_url: str, redis_url: str
) -> None:
    env = fresh_venv(tmp_path, wheel)
    where = subprocess.run(
        ["python", "-c", "import celery_tracked; print(celery_tracked.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(str(tmp_path / "venv")), where  # the wheel, not this checkout
    write_files(tmp_path, redis_url, postgres_url)

    lines = run_steps(tmp_path, env).splitlines()

    job_id, created, again_id, again_created = lines[0].split()
    assert (created, again_id, again_created) == ("True", job_id, "False")
    assert lines[1] == "{'pages': 3}"
    assert "status=<JobStatus.COMPLETED: 'completed'>" in lines[2] and "attempts_made=1" in lines[2]
    engine = create_engine(postgres_url, poolclass=NullPool)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, status FROM background_jobs")).all()
    engine.dispose()
    assert [(str(r[0]), r[1]) for r in rows] == [(job_id, "completed")]
