"""Acceptance: an app converted from plain Celery retries as it did (issue 24, item 6).

Three ``@app.task`` bodies without ``autoretry_for`` (``converted_tasks.py``), converted
with ``base=TrackedTask`` and nothing else, run on a real worker beside their plain twins
under the default ``tracked_retry_semantics`` (``"celery"``): a failing task fails once,
not retried; a task calling ``self.retry`` with Celery's default ``max_retries`` (3) runs
4 times; a run the hard time limit killed is not retried; each ends with the error plain
Celery ends with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import result_backend_worker

from celery_tracked import JobStatus

pytestmark = pytest.mark.timeout(120)
DEADLINE_S = 30.0


@pytest.fixture
def backend_worker(env: Any, start_worker: Callable[..., Any], redis_url: str) -> Iterator[None]:
    """One worker, the app and the worker with a Redis result backend (``.get()`` waits
    for a task's final state)."""
    with result_backend_worker(env, start_worker, redis_url):
        yield


def ended(result: Any) -> tuple[str, str, str]:
    """``(state, exception type, message)`` of ``result.get()`` (type ``-`` on success)."""
    try:
        value = result.get(timeout=DEADLINE_S)
    except Exception as exc:
        return result.state, type(exc).__name__, str(exc)
    return result.state, "-", repr(value)


#: name, the final outcome (plain Celery's), runs of the body, the job's max_attempts
CASES = [
    ("ok", ("SUCCESS", "-", "{'x': 'ok', 'run': 1}"), 1),
    ("fails", ("FAILURE", "ValueError", "fails: run 1 failed"), 1),
    ("retries", ("FAILURE", "ValueError", "retries: run 4 failed"), 4),
    # the hard time limit kills the run: plain Celery fails it, no retry
    ("hangs", ("FAILURE", "TimeLimitExceeded", "TimeLimitExceeded(1,)"), 1),
]


def test_a_converted_app_retries_as_on_plain_celery(
    env: Any, backend_worker: None, cli_in_process: Callable[..., Any]
) -> None:
    sent = [
        (
            name,
            env.task(f"acc.conv.p.{name}").apply_async(kwargs={"x": name}),
            env.task(f"acc.conv.t.{name}").apply_async(kwargs={"x": name}),
        )
        for name, _outcome, _runs in CASES
    ]
    for (name, plain, tracked), (_, outcome, runs) in zip(sent, CASES, strict=True):
        assert ended(plain) == outcome, f"plain {name}"
        assert ended(tracked) == outcome, f"converted {name}"
        job = env.wait_status(tracked.id, "completed", "failed")
        assert (env.ran(plain.id), env.ran(tracked.id)) == (runs, runs), name
        assert job.attempts_made == runs, env.diagnose(tracked.id)
        assert job.max_attempts == 4  # Celery's max_retries = 3
        expected = JobStatus.COMPLETED if name == "ok" else JobStatus.FAILED
        assert job.status is expected, env.diagnose(tracked.id)
    failed_once = sent[1][2].id
    shown = cli_in_process("show", failed_once, "--no-history")
    why = "its task does not retry ValueError: under Celery's retry semantics, only self.retry"
    assert f"1/4  (not retried: {why}" in shown.stdout
