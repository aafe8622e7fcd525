"""The workers the story runs on: a thread in this process (embedded), or real
``celery worker`` processes (services mode), stopped when the story ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping

from celery import Celery
from celery.contrib.testing.worker import start_worker

from .config import QUEUES, ROOT, data_dir

#: The worker processes of services mode: one for documents and jobs, one for courses.
GROUPS = {"docs": "documents,jobs", "courses": "courses"}
START_TIMEOUT_S = 40.0


@contextlib.contextmanager
def in_process(app: Celery) -> Iterator[None]:
    """Celery's own test worker, in a thread of this process (solo pool)."""
    with start_worker(
        app, pool="solo", perform_ping_check=False, loglevel="WARNING", queues=list(QUEUES)
    ):
        yield


def _spawn(
    group: str, queues: str, tag: str, environ: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """A worker of ``group``, its output in ``<data dir>/worker-<group>.log``."""
    command = [
        *(sys.executable, "-m", "celery", "-A", "example_project.demo.app", "worker"),
        *("-Q", queues, "-c", "2", "-n", f"demo-{group}-{tag}@%h", "--loglevel=WARNING"),
    ]
    env = {**environ, "PYTHONPATH": str(ROOT)}
    folder = data_dir(environ)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"worker-{group}.log", "wb") as log:
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait_ready(app: Celery, names: set[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    answered: set[str] = set()
    while time.monotonic() < deadline:
        for reply in app.control.ping(timeout=0.5):
            answered.update(name for name in reply if name.split("@")[0] in names)
        if {name.split("@")[0] for name in answered} >= names:
            return
    raise RuntimeError(f"the demo's workers did not start in {START_TIMEOUT_S:.0f} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)  # a warm shutdown of the worker and its pool
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@contextlib.contextmanager
def subprocesses(app: Celery, tag: str, environ: Mapping[str, str]) -> Iterator[None]:
    """``celery -A example_project.demo.app worker`` processes, one per queue group."""
    procs = [_spawn(group, queues, tag, environ) for group, queues in GROUPS.items()]
    try:
        _wait_ready(app, {f"demo-{group}-{tag}" for group in GROUPS})
        logs = data_dir(environ) / "worker-*.log"
        print(f"  {len(procs)} celery worker processes ready (their logs: {logs})", flush=True)
        yield
    finally:
        for proc in procs:
            _stop(proc)
