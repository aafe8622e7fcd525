"""Acceptance: a tracked task's retries end like plain Celery's (issue 12, items 3, 13, 8).

The same body runs as a plain ``@app.task`` (``acc.p.*``) beside the tracked one
(``acc.t.*``, ``retry_tasks.py``), on a real worker with a Redis result backend and task
events folded into Flower's model (``celery.events.state.State``); they must agree on the
final state, the exception ``.get()`` raises, the ``request.retries`` each run saw and the
retries Flower shows. Eager mode (``task_always_eager`` + ``task_eager_propagates``) too.
Item 8: a hard time limit's retry waits what the task's retry policy says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import tracked_app
from celery import Celery, chord
from celery.exceptions import MaxRetriesExceededError, Retry
from conftest import result_backend_worker
from retry_tasks import COUNTDOWN_S, TIME_LIMIT_DELAY_S

from celery_tracked import JobStatus
from celery_tracked.core.jobs import CLAIM_EARLY_S
from tests.conftest import wait_for

DEADLINE_S = 30.0
pytestmark = pytest.mark.timeout(120)


class Watch:
    """Celery's task events as Flower sees them, captured in a thread."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.state = app.events.State()
        self.names: list[tuple[str, str]] = []
        self._conn = app.connection_for_read()
        self._receiver = app.events.Receiver(self._conn, handlers={"*": self._on})
        self._thread = threading.Thread(target=self._capture, daemon=True)

    def _on(self, event: dict[str, Any]) -> None:
        self.names.append((event["type"], event.get("uuid", "")))
        self.state.event(event)

    def _capture(self) -> None:
        self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def start(self) -> None:
        self._thread.start()

        def heard() -> bool:  # subscribed once our own ping comes back
            with self.app.events.default_dispatcher() as dispatcher:
                dispatcher.send("test-ping")
            return ("test-ping", "") in self.names

        wait_for(heard, timeout=20, interval=0.2, what="the event receiver")

    def stop(self) -> None:
        self._receiver.should_stop = True
        self._thread.join(timeout=10)
        self._conn.release()

    def flower(self, task_id: str) -> tuple[str, int]:
        """Flower's state and "Retries" of a task."""
        task = self.state.tasks[task_id]
        return str(task.state), int(task.retries or 0)

    def retried(self, task_id: str) -> int:
        """How many ``task-retried`` events the task sent."""
        return self.names.count(("task-retried", task_id))


@pytest.fixture
def watched(env: Any, start_worker: Callable[..., Any], redis_url: str) -> Iterator[Watch]:
    """The test's app and one worker (events on), both with a Redis result backend."""
    watch = Watch(env.app)
    watch.start()
    with result_backend_worker(env, start_worker, redis_url, events=True):
        yield watch
        watch.stop()


def outcome(result: Any) -> tuple[str, str, str]:
    """``(state, exception type, message)`` of ``result.get()`` (type ``-`` on success)."""
    try:
        value = result.get(timeout=DEADLINE_S)
    except Exception as exc:
        message = str(exc).replace(result.id, "<id>")
        return result.state, type(exc).__name__, message
    return result.state, "-", repr(value)


def seen_retries(env: Any, task_id: str) -> list[int]:
    """``self.request.retries`` of each run of the task, in order."""
    return [int(n) for n in env.redis.lrange(f"retries:{task_id}", 0, -1)]


FAILED_A = ("FAILURE", "ValueError", "a: run 4 failed")
FAILED_C = ("FAILURE", "ValueError", "c: run 2 failed")
FAILED_E = ("FAILURE", "ValueError", "e: run 4 failed")
MAX_RETRIES = ("FAILURE", "MaxRetriesExceededError", "")
#: name, keyword arguments, the expected outcome, and runs (retries seen by each run)
SCENARIOS: list[tuple[str, dict[str, Any], tuple[str, str, str], list[int]]] = [
    # ``raise self.retry(exc=...)`` on every run: the body's exception after max_retries=3
    ("self_retry", {"x": "a"}, FAILED_A, [0, 1, 2, 3]),
    # without ``exc``: Celery's MaxRetriesExceededError
    ("self_retry", {"x": "b", "exc": False}, MAX_RETRIES, [0, 1, 2, 3]),
    # ``self.retry(max_retries=1)``: the call's own limit, as in Celery
    ("self_retry", {"x": "c", "limit": 1}, FAILED_C, [0, 1]),
    # two retries, then success
    ("self_retry", {"x": "d", "fail_runs": 2}, ("SUCCESS", "-", "{'x': 'd', 'run': 3}"), [0, 1, 2]),
    # ``autoretry_for=(ValueError,)``: the body's exception after max_retries=3
    ("raises", {"x": "e"}, FAILED_E, [0, 1, 2, 3]),
    ("raises", {"x": "f", "fail_runs": 1}, ("SUCCESS", "-", "{'x': 'f', 'run': 2}"), [0, 1]),
]


def same(expected: tuple[str, str, str], got: tuple[str, str, str]) -> bool:
    """The same outcome (Celery's ``MaxRetriesExceededError`` names the task and its id)."""
    if expected[1] == "MaxRetriesExceededError":
        return got[:2] == expected[:2] and got[2].startswith("Can't retry")
    return got == expected


def test_retries_end_like_plain_celery_on_a_worker(env: Any, watched: Watch) -> None:
    sent = [
        (
            env.task(f"acc.p.{name}").apply_async(kwargs=kwargs),
            env.task(f"acc.t.{name}").apply_async(kwargs=kwargs),
            expected,
            runs,
        )
        for name, kwargs, expected, runs in SCENARIOS
    ]
    for plain, tracked, expected, runs in sent:
        plain_end, tracked_end = outcome(plain), outcome(tracked)
        assert same(expected, plain_end), (plain_end, "plain Celery differs from the premise")
        assert same(expected, tracked_end), (tracked_end, env.diagnose(tracked.id))
        assert seen_retries(env, plain.id) == runs
        assert seen_retries(env, tracked.id) == runs, env.diagnose(tracked.id)

        # Flower's view: the same final state, the same "Retries", one task-retried each
        final = "FAILURE" if expected[0] == "FAILURE" else "SUCCESS"
        for result in (plain, tracked):
            wait_for(
                lambda r=result, f=final: watched.flower(r.id)[0] == f,
                timeout=10,
                what=f"{result.id} to be {final} in Flower",
            )
        assert watched.flower(tracked.id) == watched.flower(plain.id) == (final, len(runs) - 1)
        assert watched.retried(tracked.id) == watched.retried(plain.id) == len(runs) - 1

        job = env.tracker.get_job(tracked.id)
        assert job.attempts_made == len(runs)
        if final == "FAILURE":
            assert job.status is JobStatus.FAILED and job.error_type == expected[1]
            assert job.retries_exhausted is True
        else:
            assert job.status is JobStatus.COMPLETED
        waits_its_countdown(env, tracked.id)


def waits_its_countdown(env: Any, job_id: str) -> None:
    """Each ``self.retry(countdown=0.2)`` is recorded as the wait Celery makes (its
    ``retrying`` event's "retry in N ms", counted from its write: not ended early), and the
    next attempt starts once that is due (up to the claim's margin before it), and soon."""
    history = env.tracker.history(job_id)
    retrying = [e for e in history if e.event == "retrying"]
    begun = [e for e in history if e.event in ("started", "redelivered")]
    countdown = timedelta(seconds=COUNTDOWN_S)
    for retry, began, start in zip(retrying, begun, begun[1:], strict=False):
        waited_ms = int(retry.message.split("retry in ")[1].split(" ms")[0])
        # counted from the publish (after the attempt began, before the write): due no
        # earlier than a countdown after the attempt began (it ended 250 ms early before),
        # no later than a countdown after the write; a slow write leaves less to wait
        due = retry.created_at + timedelta(milliseconds=waited_ms)
        slack = timedelta(milliseconds=50)  # the two clocks' readings a moment apart
        assert began.created_at + countdown - slack <= due, (retry.message, began.created_at)
        assert due <= retry.created_at + countdown, retry.message
        late_ms = (start.created_at - due).total_seconds() * 1000
        # never early (up to the claim's margin); soon, though a loaded machine delays a start
        assert -CLAIM_EARLY_S * 1000 <= late_ms < 5000, (late_ms, env.diagnose(job_id))


def test_max_retries_exceeded_never_shows_an_escaped_secret(
    env: Any, watched: Watch, tmp_path: Path
) -> None:
    """Celery's ``MaxRetriesExceededError`` quotes the call's arguments (a password with
    backslashes doubled, and doubled again in a repr of its message): masked in the row's
    ``error_message``, the result backend and the worker's log."""
    password = "C:\\new\\pw-1"
    result = env.task("acc.t.login_retry").apply_async(("alice", password))
    with pytest.raises(MaxRetriesExceededError) as info:
        result.get(timeout=DEADLINE_S)
    assert "***" in str(info.value) and "pw-1" not in str(info.value) + repr(info.value)
    job = env.tracker.get_job(result.id)
    assert job.status is JobStatus.FAILED and job.error_type == "MaxRetriesExceededError"
    assert "***" in job.error_message and "pw-1" not in job.error_message
    logs = [path.read_text(errors="replace") for path in tmp_path.glob("worker-*")]
    assert any("failed after attempt 2/2" in text for text in logs), logs
    assert not any("pw-1" in text for text in logs)


def test_a_chord_with_a_member_out_of_retries_fails_like_plain_celery(
    env: Any, watched: Watch
) -> None:
    ends = {}
    for kind in ("p", "t"):
        header = [
            env.task(f"acc.{kind}.self_retry").s(x="chord"),
            env.task(f"acc.{kind}.raises").s(x="ok", fail_runs=1),
        ]
        result = chord(header)(env.task(f"acc.{kind}.collect").s())
        ends[kind] = outcome(result)
        failed = [r.id for r in result.parent.results if r.state == "FAILURE"]
        assert len(failed) == 1
    # what ``.get()`` raises (the chord's state, read right after, races its callback)
    assert ends["t"][1:] == ends["p"][1:] == ("ValueError", "chord: run 4 failed"), ends


def eager_scenarios() -> Iterator[tuple[str, dict[str, Any], tuple[str, str, str], list[int]]]:
    """The worker scenarios, on fresh arguments."""
    for name, kwargs, expected, runs in SCENARIOS:
        yield name, {**kwargs, "x": f"eager-{kwargs['x']}"}, expected, runs


@pytest.fixture
def in_process(env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``env``, with bodies run in this process recording on the test's own Redis DB
    (``tracked_app`` keeps one client per process, made for the first test's DB)."""
    monkeypatch.setattr(tracked_app, "_records", {})
    env.app.conf.update(task_always_eager=True)
    return env


@pytest.mark.parametrize("call", ["delay", "apply"])
def test_eager_retries_end_like_plain_celery(in_process: Any, call: str) -> None:
    """``task_always_eager`` without ``task_eager_propagates``: the same ``EagerResult``."""
    env = in_process
    env.app.conf.update(task_eager_propagates=False)
    for name, kwargs, expected, runs in eager_scenarios():
        ends = {}
        for kind in ("p", "t"):
            task = env.task(f"acc.{kind}.{name}")
            result = task.delay(**kwargs) if call == "delay" else task.apply(kwargs=kwargs)
            ends[kind] = outcome(result)
            assert seen_retries(env, result.id) == runs, (kind, kwargs)
        assert ends["p"][:2] == expected[:2], ("the premise", kwargs, ends)
        assert same(ends["p"], ends["t"]), (kwargs, ends)
        job = env.tracker.get_job(result.id)
        assert job.attempts_made == len(runs)
        assert job.retries_exhausted is (expected[0] == "FAILURE")


def test_eager_propagation_raises_the_bodys_exception_after_the_last_retry(
    in_process: Any,
) -> None:
    """``task_eager_propagates``: plain Celery raises its ``Retry`` out of the first call
    (its eager retries do not run); a tracked task runs its retries inline and raises the
    body's own exception once they are used up (docs/converting.md)."""
    env = in_process
    env.app.conf.update(task_eager_propagates=True)
    task = env.task("acc.t.self_retry")
    with pytest.raises(ValueError, match=r"^ea: run 4 failed$"):
        task.delay(x="ea")
    with pytest.raises(MaxRetriesExceededError):
        task.apply(kwargs={"x": "eb", "exc": False})
    with pytest.raises(ValueError, match=r"^ec: run 2 failed$"):
        task.delay(x="ec", limit=1)
    with pytest.raises(ValueError, match=r"^ee: run 4 failed$"):
        env.task("acc.t.raises").apply(kwargs={"x": "ee"})
    assert task.delay(x="ed", fail_runs=2).get() == {"x": "ed", "run": 3}
    rows = env.sql(
        "SELECT status, attempts_made, retries_exhausted, error_type FROM background_jobs "
        "ORDER BY created_at"
    )
    assert [tuple(r) for r in rows] == [
        ("failed", 4, True, "ValueError"),
        ("failed", 4, True, "MaxRetriesExceededError"),
        ("failed", 2, True, "ValueError"),
        ("failed", 4, True, "ValueError"),
        ("completed", 3, False, None),
    ]
    with pytest.raises(Retry):  # the premise: plain Celery's eager retry propagates
        env.task("acc.p.self_retry").delay(x="ep")


def test_a_hard_time_limit_retry_waits_the_tasks_fixed_delay(env: Any, watched: Watch) -> None:
    """``default_retry_delay=1.5, retry_jitter=False``: each retry after a hard time limit
    waits 1.5 s (not the default exponential, jittered backoff from 1.5 s: 1.5-1.9 s, then
    3-3.8 s), and its message counts the retry (Flower's "Retries")."""
    job_id = env.task("acc.tl_fixed").enqueue(x="tl", hang_runs=2).job_id
    job = env.wait_status(job_id, "completed", "failed", timeout=40)
    assert job.status is JobStatus.COMPLETED and job.attempts_made == 3, env.diagnose(job_id)
    history = env.tracker.history(job_id)
    retrying = [e for e in history if e.event == "retrying"]
    started = [e for e in history if e.event == "started"]
    assert [e.message.split(" after ")[0] for e in retrying] == ["retry in 1500 ms"] * 2
    for before, after in zip(retrying, started[1:], strict=True):
        gap = (after.created_at - before.created_at).total_seconds()
        assert TIME_LIMIT_DELAY_S - 0.3 <= gap < TIME_LIMIT_DELAY_S + 1.0, gap
    assert len(list(pairwise(started))) == 2
    wait_for(lambda: watched.flower(job_id)[0] == "SUCCESS", timeout=10, what="Flower's view")
    assert watched.flower(job_id) == ("SUCCESS", 2)
