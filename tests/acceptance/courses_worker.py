"""``celery -A courses_worker worker``: the example's course-generation app as a worker of
the test's services, plus a fault only tests use: with ``COURSES_TEST_KILL_AFTER=<task>``
the pool child SIGKILLs itself right after that step's completion committed, before its
successor is published (once: a marker file under ``COURSES_TEST_STATE``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from celery_tracked import Tracker
from celery_tracked.core.hooks import Hooks, Transition
from example_project.courses import celery_app as app


class KillAfterCompletion(Hooks):
    def __init__(self, task_name: str, marker: Path) -> None:
        self.task_name = task_name
        self.marker = marker

    def after_transition(self, transition: Transition) -> None:
        if transition.event != "completed" or transition.job_type != self.task_name:
            return
        if self.marker.exists():
            return
        self.marker.write_text(transition.job_id)
        os.kill(os.getpid(), signal.SIGKILL)


if os.environ.get("COURSES_TEST_KILL_AFTER"):
    tracker = Tracker.for_app(app)
    marker = Path(os.environ["COURSES_TEST_STATE"]) / "killed"
    # before the built-in hooks: the successor is not published yet when the child dies
    tracker._services.hooks.hooks.insert(
        0, KillAfterCompletion(os.environ["COURSES_TEST_KILL_AFTER"], marker)
    )

__all__ = ["app"]
