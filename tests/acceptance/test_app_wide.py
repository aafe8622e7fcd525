"""App-wide tracking: ``Celery(task_cls=TrackedTask)`` or its string form (issue 24,
item 1): any import order; every task of the app tracked, ``shared_task``s included;
Celery's built-in tasks and ours left untracked, and working."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from celery_tracked import Tracker

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

#: Each a fresh interpreter: what it imports before the app is finalized is the point.
ORDERS = {
    "string form, celery_tracked never imported before": """
        app = Celery("aw", broker="memory://", task_cls="celery_tracked:TrackedTask")
    """,
    "string form, celery_tracked imported after the app was made": """
        app = Celery("aw", broker="memory://", task_cls="celery_tracked:TrackedTask")
        import celery_tracked
    """,
    "the class": """
        from celery_tracked import TrackedTask
        app = Celery("aw", broker="memory://", task_cls=TrackedTask)
    """,
    "the class, after another app was finalized": """
        Celery("plain", broker="memory://").finalize()
        from celery_tracked import TrackedTask
        app = Celery("aw", broker="memory://", task_cls=TrackedTask)
    """,
}

SCRIPT = """
import json
from celery import Celery, shared_task
{make_app}
import celery.contrib.testing.tasks  # celery.ping, a shared task Celery defines

@app.task(name="aw.add")
def add(a, b):
    return a + b

@shared_task(name="aw.mul")
def mul(a, b):
    return a * b

app.finalize()
from celery_tracked import TrackedTask
tracked = sorted(n for n, t in app.tasks.items() if isinstance(t, TrackedTask))
print(json.dumps({{"tracked": tracked, "all": sorted(app.tasks)}}))
"""


@pytest.mark.parametrize("order", list(ORDERS))
def test_app_wide_tracking_in_any_import_order(order: str) -> None:
    script = SCRIPT.format(make_app=textwrap.dedent(ORDERS[order]))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["tracked"] == ["aw.add", "aw.mul"]
    celerys = {"celery.chord_unlock", "celery.backend_cleanup", "celery.chord", "celery.ping"}
    assert celerys <= set(found["all"])
    assert {"celery_tracked.relay", "celery_tracked.reap", "celery_tracked.cleanup"} <= set(
        found["all"]
    )


def test_an_app_wide_worker_tracks_every_task_and_runs_celerys_own(
    env: Any, start_worker: Any, tmp_path: Path
) -> None:
    """A real worker of ``appwide_app``: ``@app.task`` and ``@shared_task`` jobs tracked;
    a chord on a result backend without native join, whose ``celery.chord_unlock``
    polls (untracked) while its header runs; ``celery.backend_cleanup`` and
    ``celery.starmap`` run, untracked."""
    import appwide_app
    from celery import chord

    backend = f"db+sqlite:///{tmp_path / 'results.db'}"
    start_worker(app="appwide_app", environ={"TRACKED_TEST_RESULT_BACKEND": backend})
    app = appwide_app.create_app({**env.config, "result_backend": backend})
    try:
        add, total = app.tasks["aw.add"], app.tasks["aw.total"]
        added, multiplied = add.delay(1, 2), app.tasks["aw.mul"].delay(2, 3)
        assert (added.get(timeout=30), multiplied.get(timeout=30)) == (3, 6)
        for done in (added, multiplied):
            assert env.wait_status(done.id, "completed").task_name in ("aw.add", "aw.mul")
        header = [add.s(i, i, seconds=1.5) for i in range(3)]
        chorded = chord(header, total.s()).delay()
        assert chorded.get(timeout=60) == 6
        env.wait_status(chorded.id, "completed")  # the body: a tracked job
        cleaned = app.tasks["celery.backend_cleanup"].delay()
        assert cleaned.get(timeout=30) is None
        # one untracked celery.starmap message calling the body directly, per item
        assert app.tasks["aw.mul"].starmap([(1, 2), (3, 4)]).delay().get(timeout=30) == [2, 12]
        rows = env.sql("SELECT task_name, status FROM background_jobs ORDER BY task_name")
        assert [tuple(r) for r in rows] == [
            ("aw.add", "completed"),
            ("aw.add", "completed"),
            ("aw.add", "completed"),
            ("aw.add", "completed"),
            ("aw.mul", "completed"),
            ("aw.total", "completed"),
        ]
    finally:
        Tracker.for_app(app).close()
        app.close()


def test_results_through_celerys_own_subscription(env: Any, start_worker: Any) -> None:
    """A Redis result backend and a real worker: ``apply_async`` returns the result
    Celery subscribed for, whose ``.get()`` gets the worker's value; an ignored one
    returns None at once."""
    import appwide_app

    backend = env.config["redis_url"]
    start_worker(app="appwide_app", environ={"TRACKED_TEST_RESULT_BACKEND": backend})
    app = appwide_app.create_app({**env.config, "result_backend": backend})
    try:
        add = app.tasks["aw.add"]
        result = add.apply_async((1, 2))
        assert app.backend.get_key_for_task(result.id) in app.backend.result_consumer.subscribed_to
        assert result.get(timeout=30) == 3
        ignored = add.apply_async((2, 2), ignore_result=True)
        assert ignored.get(timeout=1) is None
        assert env.wait_status(ignored.id, "completed").result == 4
    finally:
        Tracker.for_app(app).close()
        app.close()
