"""Acceptance: a secret passed as ``password`` leaks nowhere.

Not into ``payload_json``, the worker's output, the messages' ``argsrepr``/``kwargsrepr``,
Celery task events (``task-sent``/``task-received``/``task-retried``/``task-failed``, also
for the retried messages), the job's ``error_message`` or its history.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from conftest import HERE, worker_environ
from safety_tasks import CUSTOM_KEY

from celery_tracked import JobStatus
from tests.conftest import wait_for


class EventCapture:
    """Collects every Celery event of the test's broker in a background thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._run, name="event-capture", daemon=True)
        self.error: BaseException | None = None

    def _on_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)

    def _run(self) -> None:
        try:
            with self.app.connection_for_read() as conn:
                self._receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
                self._receiver.capture(limit=None, timeout=None, wakeup=False)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def of(self, kind: str, job_id: str) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e.get("type") == kind and e.get("uuid") == job_id]

    def start(self) -> None:
        self._thread.start()
        probe = f"probe-{uuid.uuid4().hex}"
        with self.app.events.default_dispatcher() as dispatcher:

            def probed() -> bool:
                dispatcher.send("task-probe", uuid=probe)
                return any(e.get("uuid") == probe for e in self.snapshot())

            wait_for(probed, timeout=15, interval=0.2, what="the event receiver to listen")

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the event receiver did not stop"


def test_canary_secret_never_leaks(env: Any, start_worker: Any) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    task = env.task("acc.secret")
    capture = EventCapture(env.app)
    capture.start()
    try:
        # fails once (the exception message holds the password), then succeeds
        once = task.enqueue(user="alice", password=canary, fail_times=1).job_id
        # always fails
        never = task.enqueue(user="bob", password=canary, fail_times=99, _max_attempts=2).job_id
        # the password passed positionally
        positional = task.apply_async(args=("carol", canary), kwargs={"fail_times": 1}).id

        # the published messages (no worker yet): the password is only in the body
        messages = env.broker_messages()
        assert sorted(m["headers"]["id"] for m in messages) == sorted([once, never, positional])
        for message in messages:
            headers = message["headers"]
            assert canary not in json.dumps(headers)
            assert "[redacted]" in headers["kwargsrepr"] + headers["argsrepr"]

        worker = start_worker(events=True)
        job_once = env.wait_status(once, "completed", "failed", timeout=30)
        job_never = env.wait_status(never, "completed", "failed", timeout=30)
        job_positional = env.wait_status(positional, "completed", "failed", timeout=30)
        wait_for(
            lambda: (
                capture.of("task-succeeded", once)
                and capture.of("task-failed", never)
                and capture.of("task-succeeded", positional)
            ),
            timeout=20,
            what="the final task events",
        )
    finally:
        capture.stop()
    assert capture.error is None, capture.error

    # the jobs behaved as intended
    assert job_once.status is JobStatus.COMPLETED
    assert job_once.attempts_made == 2
    assert job_never.status is JobStatus.FAILED
    assert job_never.attempts_made == 2
    assert job_positional.status is JobStatus.COMPLETED
    assert job_positional.attempts_made == 2
    assert env.ran(once) == 2 and env.ran(never) == 2 and env.ran(positional) == 2

    # payload_json
    for job in (job_once, job_never, job_positional):
        assert canary not in (job.payload_json or "")
    for job in (job_once, job_never):
        assert job.payload["kwargs"]["password"] == "[redacted]"
        assert job.payload["kwargs"]["user"] in ("alice", "bob")
    assert job_positional.payload["args"] == ["carol", "[redacted]"]

    # error_message and history
    assert job_never.error_type == "RuntimeError"
    assert job_never.error_message is not None
    assert canary not in job_never.error_message
    assert job_never.error_message.startswith("login failed for bob with password ")
    for job_id in (once, never, positional):
        for event in env.tracker.history(job_id):
            assert canary not in (event.message or ""), event
    retried = [e for e in env.tracker.history(once) if e.event == "retrying"]
    assert len(retried) == 1 and "login failed for alice" in (retried[0].message or "")
    retried = [e for e in env.tracker.history(positional) if e.event == "retrying"]
    assert len(retried) == 1 and "login failed for carol" in (retried[0].message or "")

    # Celery events, the retried messages included
    events = capture.snapshot()
    for job_id in (once, never, positional):
        received = capture.of("task-received", job_id)
        assert len(received) == 2, received  # the first delivery and the retry
        for event in received:
            assert "[redacted]" in event["kwargs"] + event["args"], event
    assert capture.of("task-retried", once)
    leaked = [e for e in events if canary in json.dumps(e, default=str)]
    assert leaked == []

    # the worker's whole output, and its structured log records
    log = worker.log()
    assert "login failed for bob" in log  # the failure was logged...
    assert canary not in log  # ...without the password
    assert canary not in worker.jsonl_path.read_text()


def test_a_canary_leaks_nowhere_with_result_extended_and_events(
    env: Any, start_worker: Any, tmp_path: Path
) -> None:
    """Issue 6, item 5: a canary passed as ``password``, under a custom hyphenated redact
    key and inside a URL, raised inside an ``ExceptionGroup`` member, in a dict exception
    argument and in ``__notes__``, appears in none of: the tables, the Redis result backend
    with ``result_extended=True``, the worker log at INFO, ``celery events --dump``."""
    canary = f"canary{uuid.uuid4().hex}"
    task = env.task("acc.leaky")
    call = {"user": "alice", "password": canary, "dsn": f"postgresql://app:{canary}@db/x"}
    call[CUSTOM_KEY] = canary
    keep = {"ignore_result": False}  # the test's own app ignores results
    once = task.enqueue(**call, fail_times=1, _options=keep).job_id
    never = task.enqueue(**call, fail_times=99, _options=keep).job_id

    dump_path = tmp_path / "events.dump"
    with dump_path.open("wb") as out:
        dump = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tracked_app", "events", "--dump"],
            cwd=str(HERE),
            env=worker_environ(env.config),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: "evdump" in dump_path.read_text(), timeout=20, what="events --dump")
        worker = start_worker(
            events=True, environ={"TRACKED_TEST_RESULT_BACKEND": env.config["broker"]}
        )
        job_once = env.wait_status(once, "completed", "failed", timeout=30)
        job_never = env.wait_status(never, "completed", "failed", timeout=30)

        def dumped() -> bool:
            text = dump_path.read_text()
            return (
                f"task succeeded: acc.leaky({once})" in text
                and f"task failed: acc.leaky({never})" in text
            )

        wait_for(dumped, timeout=20, what="the final events in the dump")
    finally:
        os.killpg(dump.pid, signal.SIGTERM)
        dump.wait(timeout=10)

    assert job_once.status is JobStatus.COMPLETED and job_once.attempts_made == 2
    assert job_never.status is JobStatus.FAILED and job_never.error_type == "ExceptionGroup"
    assert job_once.payload["kwargs"][CUSTOM_KEY] == "[redacted]"
    assert job_once.payload["kwargs"]["dsn"] == "postgresql://***@db/x"

    # the tables, every column of every row
    rows = env.sql("SELECT row_to_json(j)::text FROM background_jobs j")
    rows += env.sql("SELECT row_to_json(e)::text FROM background_job_events e")
    assert len(rows) >= 8 and not [r for r in rows if canary in r[0]]

    # the result backend stored the (redacted) arguments of the success and of the failure
    metas = {job_id: env.redis.get(f"celery-task-meta-{job_id}") for job_id in (once, never)}
    for job_id, meta in metas.items():
        assert meta is not None, job_id
        stored = json.loads(meta)
        assert stored["status"] in ("SUCCESS", "FAILURE")
        assert stored["kwargs"]["password"] == "[redacted]", stored
        assert canary not in meta.decode(), stored
    leaked = [
        k for k in env.redis.scan_iter("celery-task-meta-*") if canary.encode() in env.redis.get(k)
    ]
    assert leaked == []

    # the worker's output at INFO (it logged the failures) and its structured records
    log = worker.log()
    assert "batch failed" in log and "while connecting with ***" in log
    assert canary not in log
    assert canary not in worker.jsonl_path.read_text()

    # celery events --dump
    text = dump_path.read_text()
    assert f"task retried: acc.leaky({once})" in text and "while connecting with ***" in text
    assert canary not in text
